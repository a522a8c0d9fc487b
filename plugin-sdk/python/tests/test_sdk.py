"""The Python SDK's own behaviour: settings errors name the setting, the request is read
lazily (each part once, only the parts a policy touches), decisions and host-JSON
conversion round-trip, logs are captured by the harness, and the component's exports
configure once, fail closed without settings and accept preemption plans by
default."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pytest
from componentize_py_types import Err

from forge_policy import (
    Fleet,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PlanVerdict_Accept,
    PlanVerdict_Reorder,
    PlanVerdict_Veto,
    Policy,
    PreemptionPlan,
    Request,
    SelectorOperator,
    SettingsError,
    Taint,
    TaintEffect,
    TeamShare,
    Toleration,
    TolerationOperator,
    Victim,
    WorkloadKind,
    BORROWED_GPUS_ANNOTATION,
    accept,
    admit,
    borrowing,
    decision_kind,
    gpus_by_series,
    log,
    parse_settings,
    placed,
    queue,
    reject,
    reorder,
    require_label_in,
    tolerate,
    toleration_of,
    veto,
)
from forge_policy.component import export
from forge_policy.harness import Harness, RequestBuilder, decision_to_host, request_from_host

PARTS = ("job", "cluster", "fleets", "usage", "shares", "placement")


@dataclass
class Inner:
    limit: int = 1


@dataclass
class S:
    name: str = "x"
    tags: List[str] = field(default_factory=list)
    limits: Dict[str, int] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    note: Optional[str] = None


@pytest.mark.parametrize(
    "text, message",
    [
        ("{x", "invalid settings: not JSON: "),
        ("[1]", "invalid settings: expected a JSON object, got list"),
        ('{"nam": "y"}', "invalid settings: unknown field `nam`"),
        ('{"name": 3}', 'invalid settings: name: expected str, got 3'),
        ('{"tags": "a"}', 'invalid settings: tags: expected List[str], got "a"'),
        ('{"limits": {"a": true}}', "invalid settings: limits: expected Dict[str, int]"),
        ('{"inner": {"limit": "lots"}}', 'invalid settings: inner.limit: expected int, got "lots"'),
    ],
)
def test_settings_errors_name_the_setting(text, message):
    with pytest.raises(SettingsError) as e:
        parse_settings(S, text)
    assert str(e.value).startswith(message), str(e.value)


def test_empty_settings_are_the_defaults():
    assert parse_settings(S, "  ") == S()
    assert parse_settings(S, '{"note": null, "inner": {"limit": 3}}').inner.limit == 3


class Logs(Policy[S]):
    Settings = S

    def evaluate(self, s, req):
        log.info(f"{req.job.name}: {gpus_by_series(req)}")
        return queue("x.wait", "later")


def test_harness_captures_logs_and_checks_settings():
    h = Harness(Logs)
    d = h.evaluate(RequestBuilder().name("n").pool("a", 2, 4, "h100").pool("b", 1, 8).build())
    assert decision_kind(d) == "queue"
    assert h.logs == [("info", "n: [('h100', 8), (None, 8)]")]
    with pytest.raises(SettingsError):
        Harness(Logs, '{"bogus": 1}')


class HostHandle:
    """A stand-in for the host's `request` resource, counting what is read."""

    def __init__(self, request: Request) -> None:
        self.reads: List[str] = []
        for part in PARTS:
            setattr(self, part, self._reader(request, part))

    def _reader(self, request, part):
        def read():
            self.reads.append(part)
            return getattr(request, part)

        return read


def test_the_request_reads_each_part_once_and_only_when_touched():
    handle = HostHandle(RequestBuilder().pool("a", 1, 8, "h100").build())
    req = Request.from_host(handle)
    assert handle.reads == []
    assert req.job.pools[0].name == "a"
    assert req.job is req.job
    assert gpus_by_series(req) == [("h100", 8)]
    assert handle.reads == ["job", "placement"]


def test_the_builder_shows_fleets_shares_and_usage_as_the_host_does():
    req = RequestBuilder().series("h100", 16, 8, 2).usage_of("h100", 8).build()
    (fleet,) = req.fleets
    assert (fleet.name, fleet.available, fleet.series) == ("default", True, req.cluster.series)
    assert req.shares == []
    assert req.usage[0].borrowed == 0
    assert req.placement.pools == []
    share = TeamShare(
        team="team-b", series="h100", decayed_gpu_seconds=3600.0, allocated_gpus=8,
        weight=1.0, share=0.5, fair_share=0.5,
    )
    taint = Taint(key="gpu", value=None, effect=TaintEffect.NO_SCHEDULE)
    req = (
        RequestBuilder()
        .priority(7)
        .pool("a", 1, 8, "h100")
        .resources(4000, 1 << 30)
        .series("h100", 16, 16, 2)
        .tainted(taint, 1, 8)
        .usage_of("h100", 8, borrowed=4)
        .share(share)
        .build()
    )
    assert (req.job.priority, req.job.pools[0].cpu_millis) == (7, 4000)
    capacity = req.cluster.series[0]
    assert (capacity.allocatable, capacity.free, capacity.tainted) == (8, 8, 8)
    assert (req.usage[0].borrowed, req.shares) == (4, [share])
    eu = Fleet(name="eu", labels=[("region", "eu")], available=False, series=[])
    given = RequestBuilder().pool("a", 1, 8).build().placement
    given.pools[0].series = "a100"
    req = RequestBuilder().kind(WorkloadKind.INFERENCE).fleet(eu).placement(given).build()
    assert (req.job.kind, req.fleets, req.placement) == (WorkloadKind.INFERENCE, [eu], given)


def test_admit_hands_on_the_given_placement_or_its_own_with_its_terms():
    req = RequestBuilder().pool("a", 1, 8, "h100").build()
    given = req.placement
    assert placed(admit(), given) is given
    assert decision_to_host(admit(priority_cap=3, preemptible=False), given) == {
        "kind": "admit",
        "placement": {"pools": [{"pool": "a", "series": "h100", "nodeSelector": {},
                                 "rayResources": {}, "labels": {}, "annotations": {}}]},
        "priorityCap": 3,
        "preemptible": False,
    }
    assert placed(reject("a.b", "m"), given) is None
    assert decision_to_host(queue("a.b", "m"), given) == {"kind": "queue", "code": "a.b",
                                                          "message": "m"}


def test_a_borrowing_admit_marks_every_pool():
    req = RequestBuilder().pool("a", 1, 8, "h100").pool("b", 1, 8, "h100").build()
    d = borrowing(req.placement, 8, priority_cap=5)
    host = decision_to_host(d, req.placement)
    marks = [p["annotations"] for p in host["placement"]["pools"]]
    assert marks == [{BORROWED_GPUS_ANNOTATION: "8"}] * 2
    assert host["priorityCap"] == 5


def test_host_json_round_trip():
    req = RequestBuilder().label("k", "v").pool("a", 1, 8, "h100").series("h100", 16, 8, 2).build()
    host = {
        "job": {
            "id": "job-1", "team": "team-a", "name": "train", "framework": "nemo-rl",
            "priority": 0, "storage": "shared", "labels": {"k": "v"},
            "pools": [{"name": "a", "nodes": 1, "gpusPerNode": 8, "series": "h100"}],
        },
        "cluster": {"gpuNodeLabel": "starforge/gpu-series", "series": [
            {"series": "h100", "total": 16, "allocatable": 16, "inUse": 8, "blocked": 0,
             "free": 8, "largestFreeBlock": 8, "nodes": 2,
             "defaultCpuMillis": 8000, "defaultMemoryBytes": 32 << 30}]},
        "usage": [],
    }
    from_host = request_from_host(host)
    for part in PARTS:
        assert getattr(from_host, part) == getattr(req, part), part
    assert decision_to_host(reject("a.b", "m"), req.placement) == {
        "kind": "reject", "code": "a.b", "message": "m"}
    assert decision_to_host(admit(), req.placement)["placement"] == {
        "pools": [{"pool": "a", "series": "h100", "nodeSelector": {}, "rayResources": {},
                   "labels": {}, "annotations": {}}]}


def test_scheduling_fields_use_the_hosts_spelling_both_ways():
    req = RequestBuilder().pool("a", 1, 8).build()
    pool = req.placement.pools[0]
    tolerate(pool, toleration_of(Taint(key="gpu", value="h100", effect=TaintEffect.NO_EXECUTE)))
    tolerate(pool, toleration_of(Taint(key="gpu", value="h100", effect=TaintEffect.NO_EXECUTE)))
    require_label_in(pool, "zone", ["a", "b"])
    pool.fleets.append("eu")
    host = decision_to_host(admit(req.placement), req.placement)["placement"]
    assert host["pools"][0]["tolerations"] == [
        {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoExecute"}]
    assert host["pools"][0]["affinity"] == {
        "required": [{"matchExpressions": [{"key": "zone", "operator": "In",
                                            "values": ["a", "b"]}]}]}
    assert host["pools"][0]["fleets"] == ["eu"]
    back = request_from_host({"job": {
        "id": "j", "team": "t", "name": "n", "framework": "f", "priority": 0,
        "storage": "read-write-once", "labels": {}, "kind": "inference",
        "pools": [{"name": "a", "nodes": 1, "gpusPerNode": 8, "series": None}],
    }, "placement": host})
    assert back.placement == req.placement
    assert back.job.kind.name == "INFERENCE"
    require_label_in(pool, "rack", ["r1"])
    assert pool.affinity == NodeAffinity(required=[NodeSelectorTerm(match_expressions=[
        NodeSelectorRequirement(key="zone", operator=SelectorOperator.IS_IN, values=["a", "b"]),
        NodeSelectorRequirement(key="rack", operator=SelectorOperator.IS_IN, values=["r1"]),
    ])], preferred=[])
    assert pool.tolerations == [Toleration(key="gpu", operator=TolerationOperator.EQUAL,
                                           value="h100", effect=TaintEffect.NO_EXECUTE)]
    with pytest.raises(ValueError, match="job.id"):
        request_from_host({"job": {"team": "t"}})


def plan() -> PreemptionPlan:
    def victim(job_id: str) -> Victim:
        return Victim(
            job_id=job_id, team="team-b", priority=0, gpus=8, series="h100", fleet="default",
            running_seconds=600, checkpoint_age_seconds=None, checkpoint_step=None,
            lost_gpu_seconds=4800.0, grace_seconds=30, preemptions_in_window=0,
        )

    preemptor = RequestBuilder().priority(10).pool("a", 1, 16, "h100").build().job
    return PreemptionPlan(preemptor=preemptor, series="h100", gpus_needed=16,
                          candidates=[victim("j1"), victim("j2")])


class Reverse(Policy[S]):
    Settings = S

    def evaluate(self, s, req):
        return admit()

    def plan_preemption(self, s, plan):
        if s.name == "veto":
            return veto("preempt.never", "not now")
        return reorder(reversed([c.job_id for c in plan.candidates]))


def test_preemption_plans_are_accepted_by_default_or_answered():
    assert Harness(Logs).plan_preemption(plan()) == accept() == PlanVerdict_Accept()
    assert Harness(Reverse).plan_preemption(plan()) == PlanVerdict_Reorder(["j2", "j1"])
    vetoed = Harness(Reverse, '{"name": "veto"}').plan_preemption(plan())
    assert isinstance(vetoed, PlanVerdict_Veto) and vetoed.value.code == "preempt.never"


class Counting(Policy[S]):
    """Counts how often its settings are parsed."""

    Settings = S
    parses = 0

    def parse(self, text):
        Counting.parses += 1
        return super().parse(text)

    def evaluate(self, s, req):
        return reject("x.no", s.name, "name") if req.job.name == "bad" else admit()


def test_the_component_configures_once_and_fails_closed_without_settings():
    world = export(Counting)()
    handle = HostHandle(RequestBuilder().name("bad").build())
    log._capture([])
    try:
        with pytest.raises(RuntimeError, match="called before configure"):
            world.evaluate(handle)
        with pytest.raises(RuntimeError, match="called before configure"):
            world.plan_preemption(plan())
    finally:
        log._capture(None)
    with pytest.raises(Err) as e:
        world.configure('{"name": 1}')
    assert e.value.value.startswith("invalid settings: name: ")
    with pytest.raises(Err):
        world.validate_settings('{"nope": 1}')
    Counting.parses = 0
    world.configure('{"name": "y"}')
    # Another WitWorld object (componentize-py may make one per call) sees the settings.
    again = type(world)()
    for _ in range(3):
        assert again.evaluate(handle).value.message == "y"
    assert Counting.parses == 1
    assert handle.reads == ["job"] * 3, "each call reads through its own handle"
    assert world.plan_preemption(plan()) == PlanVerdict_Accept()
