"""Native test harness for pytest: run a policy with the same settings parsing and the
same initial placement as in the host, build requests, capture logs, and convert
requests and decisions from and to the host's JSON (the form the gateway's API and
the shared test tables use)::

    h = Harness(MaxNodes, '{"max_nodes": 1}')
    d = h.evaluate(RequestBuilder().pool("train", 2, 8, "h100").build())
    assert decision_kind(d) == "reject"

Requests are built with every part given (:meth:`Request.from_parts`); what the host
has no data for yet is shown as the host shows it: one fleet named ``default`` with
the cluster's series, no team shares, no borrowed GPUs.
"""

import copy
import dataclasses
import enum
import typing
from typing import Any, Dict, Generic, List, Optional, Tuple, Type, TypeVar

from . import log
from .contract import (
    Cluster,
    Decision,
    Decision_Admit,
    Decision_Queue,
    Decision_Reject,
    Fleet,
    Job,
    NodeAffinity,
    NodeSelectorRequirement,
    Placement,
    PlanVerdict,
    Pool,
    PoolPlacement,
    PreemptionPlan,
    Rejection,
    SelectorOperator,
    SeriesCapacity,
    SeriesTaint,
    SeriesUsage,
    StorageMode,
    Taint,
    TaintEffect,
    TeamShare,
    Toleration,
    TolerationOperator,
    WorkloadKind,
)
from .decisions import placed
from .policy import Policy
from .requests import Request
from .settings import SettingsError

S = TypeVar("S")

#: CPU (millicores) :meth:`RequestBuilder.series` gives a series' machines by default.
DEFAULT_CPU_MILLIS = 8_000
#: Memory (bytes) :meth:`RequestBuilder.series` gives a series' machines by default.
DEFAULT_MEMORY_BYTES = 32 << 30
#: The fleet of a single-cluster gateway.
DEFAULT_FLEET = "default"


class Harness(Generic[S]):
    """A policy with parsed and validated settings (as ``configure`` keeps them in a
    component), run natively. Log lines of every call are appended to ``self.logs``."""

    def __init__(self, policy: Type[Policy], settings: str = "{}") -> None:
        self.policy = policy()
        self.settings = self.policy.check(settings)
        self.logs: List[Tuple[str, str]] = []

    def evaluate(self, request: Request) -> Decision:
        """Evaluate one request."""
        log._capture(self.logs)
        try:
            return self.policy.evaluate(self.settings, request)
        finally:
            log._capture(None)

    def placed(self, request: Request) -> Optional[Placement]:
        """Evaluate one request and return the placement an admit hands on (the one
        the policy was given when it admitted unchanged); ``None`` on queue or
        reject."""
        return placed(self.evaluate(request), request.placement)

    def plan_preemption(self, plan: PreemptionPlan) -> PlanVerdict:
        """Answer a preemption plan."""
        log._capture(self.logs)
        try:
            return self.policy.plan_preemption(self.settings, plan)
        finally:
            log._capture(None)


def validate(policy: Type[Policy], settings: str) -> Optional[str]:
    """What ``validate-settings`` answers: ``None`` if accepted, else the message."""
    try:
        policy().check(settings)
        return None
    except SettingsError as e:
        return str(e)


def evaluate_unchecked(policy: Type[Policy], settings: str, request: Request) -> Decision:
    """What a component does when the host configures it with settings that never
    passed ``validate-settings`` and asks it about ``request``: its ``configure`` parses
    and checks them as ``validate-settings`` does, so settings it refuses raise
    ``SettingsError`` here (in the host, the admission fails closed)."""
    p = policy()
    log._capture([])
    try:
        return p.evaluate(p.check(settings), request)
    finally:
        log._capture(None)


class RequestBuilder:
    """Builds a request with the harness defaults of every SDK: job ``job-1`` named
    ``train`` of team ``team-a``, a training job of framework ``nemo-rl`` at priority
    0, shared storage, node label ``starforge/gpu-series``, one fleet ``default`` with
    the cluster's series, no usage, no shares, and the initial placement the host gives
    the first plugin."""

    def __init__(self) -> None:
        self.job = Job(
            id="job-1",
            team="team-a",
            name="train",
            framework="nemo-rl",
            kind=WorkloadKind.TRAINING,
            priority=0,
            pools=[],
            storage=StorageMode.SHARED,
            labels=[],
        )
        self.cluster = Cluster(gpu_node_label="starforge/gpu-series", series=[])
        self.fleets: List[Fleet] = []
        self.usage: List[SeriesUsage] = []
        self.shares: List[TeamShare] = []
        self.placement_so_far: Optional[Placement] = None

    def team(self, team: str) -> "RequestBuilder":
        self.job.team = team
        return self

    def name(self, name: str) -> "RequestBuilder":
        self.job.name = name
        return self

    def label(self, key: str, value: str) -> "RequestBuilder":
        self.job.labels.append((key, value))
        return self

    def storage(self, storage: StorageMode) -> "RequestBuilder":
        self.job.storage = storage
        return self

    def kind(self, kind: WorkloadKind) -> "RequestBuilder":
        """The workload kind (training by default)."""
        self.job.kind = kind
        return self

    def priority(self, priority: int) -> "RequestBuilder":
        """The job's priority (0 by default; larger is more important)."""
        self.job.priority = priority
        return self

    def pool(
        self, name: str, nodes: int, gpus: int, series: Optional[str] = None
    ) -> "RequestBuilder":
        """Add a pool: ``nodes`` machines with ``gpus`` GPUs each, optionally asking for
        a series."""
        self.job.pools.append(
            Pool(
                name=name,
                nodes=nodes,
                gpus_per_node=gpus,
                series=series,
                cpu_millis=None,
                memory_bytes=None,
            )
        )
        return self

    def resources(self, cpu_millis: int, memory_bytes: int) -> "RequestBuilder":
        """CPU (millicores) and memory (bytes) per machine of the last added pool."""
        self.job.pools[-1].cpu_millis = cpu_millis
        self.job.pools[-1].memory_bytes = memory_bytes
        return self

    def series(self, name: str, total: int, free: int, nodes: int) -> "RequestBuilder":
        """A series with ``total`` GPUs on ``nodes`` nodes, ``free`` of them free, no
        taints, machines of :data:`DEFAULT_CPU_MILLIS` and
        :data:`DEFAULT_MEMORY_BYTES`."""
        largest = min(free, total // nodes) if nodes else 0
        return self.capacity(
            SeriesCapacity(
                series=name,
                total=total,
                allocatable=total,
                in_use=total - min(free, total),
                blocked=0,
                free=free,
                largest_free_block=largest,
                nodes=nodes,
                tainted=0,
                taints=[],
                default_cpu_millis=DEFAULT_CPU_MILLIS,
                default_memory_bytes=DEFAULT_MEMORY_BYTES,
            )
        )

    def tainted(self, taint: Taint, nodes: int, gpus: int) -> "RequestBuilder":
        """Mark ``gpus`` GPUs on ``nodes`` nodes of the last added series as tainted
        with ``taint`` (not tolerated by Forge's pods: moved out of allocatable and
        free)."""
        s = self.cluster.series[-1]
        s.tainted += gpus
        s.allocatable = max(s.allocatable - gpus, 0)
        s.free = max(s.free - gpus, 0)
        s.largest_free_block = min(s.largest_free_block, s.free)
        s.taints.append(SeriesTaint(taint=taint, nodes=nodes))
        return self

    def capacity(self, capacity: SeriesCapacity) -> "RequestBuilder":
        """Add a series with every field given."""
        self.cluster.series.append(capacity)
        return self

    def fleet(self, fleet: Fleet) -> "RequestBuilder":
        """Add a fleet with every field given; without any, the request has one fleet
        ``default`` with the cluster's series."""
        self.fleets.append(fleet)
        return self

    def usage_of(
        self, series: str, running: int, queued: int = 0, borrowed: int = 0
    ) -> "RequestBuilder":
        """The team's usage of a series (``borrowed``: GPUs of ``running`` beyond its
        guaranteed quota)."""
        self.usage.append(
            SeriesUsage(series=series, running=running, queued=queued, borrowed=borrowed)
        )
        return self

    def share(self, share: TeamShare) -> "RequestBuilder":
        """A team's fair-share standing on a series."""
        self.shares.append(share)
        return self

    def placement(self, placement: Placement) -> "RequestBuilder":
        """Override the placement so far (as if earlier plugins had run)."""
        self.placement_so_far = placement
        return self

    def build(self) -> Request:
        return Request.from_parts(
            job=self.job,
            cluster=self.cluster,
            fleets=self.fleets or [single_fleet(self.cluster)],
            usage=self.usage,
            shares=self.shares,
            placement=(
                self.placement_so_far
                if self.placement_so_far is not None
                else initial_placement(self.job)
            ),
        )


def initial_placement(job: Job) -> Placement:
    """The placement the host gives the first plugin of a chain: one entry per pool
    with its requested series and nothing else."""
    return Placement(
        pools=[
            PoolPlacement(
                pool=p.name,
                series=p.series,
                node_selector=[],
                ray_resources=[],
                labels=[],
                annotations=[],
                tolerations=[],
                affinity=NodeAffinity(required=[], preferred=[]),
                fleets=[],
            )
            for p in job.pools
        ]
    )


def single_fleet(cluster: Cluster) -> Fleet:
    """The fleets of a single-cluster gateway: one, ``default``, available, with the
    cluster's series."""
    return Fleet(
        name=DEFAULT_FLEET, labels=[], available=True, series=copy.deepcopy(cluster.series)
    )


# The host's JSON: camelCase fields; storage mode and workload kind in kebab-case;
# taint effects and the toleration and selector operators in the Kubernetes spelling.
_KUBERNETES_ENUMS = (TaintEffect, TolerationOperator, SelectorOperator)
_KUBERNETES_SPELLING = {SelectorOperator.IS_IN: "In"}

# Fields the host's JSON leaves out when empty (`None`, `[]`, or an affinity with no
# terms).
_OMITTED_WHEN_EMPTY = {
    (Pool, "cpu_millis"),
    (Pool, "memory_bytes"),
    (SeriesCapacity, "taints"),
    (Taint, "value"),
    (Toleration, "key"),
    (Toleration, "value"),
    (Toleration, "effect"),
    (NodeSelectorRequirement, "values"),
    (NodeAffinity, "required"),
    (NodeAffinity, "preferred"),
    (PoolPlacement, "tolerations"),
    (PoolPlacement, "affinity"),
    (PoolPlacement, "fleets"),
    (Rejection, "field"),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _enum_to_host(value: enum.Enum) -> str:
    if isinstance(value, _KUBERNETES_ENUMS):
        return _KUBERNETES_SPELLING.get(value) or "".join(
            w.capitalize() for w in value.name.split("_")
        )
    return value.name.lower().replace("_", "-")


def _absent(tp: Any, where: str) -> Any:
    """What a field missing from the host's JSON reads as: the host's default for
    fields added after contract 0.1.0 (none, empty, 0, the first enum member, e.g. a
    training job). A missing string or flag is an error."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        return None
    if origin in (list, List):
        return []
    if dataclasses.is_dataclass(tp):
        return _from_host(tp, {}, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))
    if tp in (int, float):
        return tp()
    raise ValueError(f"host JSON: `{where}` is missing")


def _from_host(tp: Any, value: Any, where: str) -> Any:
    """Host JSON → the generated type ``tp``, by its type hints (string maps are JSON
    objects in the host's form, lists of pairs in the contract's)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {}
        for f in dataclasses.fields(tp):
            key = _camel(f.name)
            at = f"{where}.{key}" if where else key
            v = value.get(key)
            fields[f.name] = (
                _absent(hints[f.name], at) if v is None else _from_host(hints[f.name], v, at)
            )
        return tp(**fields)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return _from_host(inner[0], value, where)
    if origin in (list, List):
        (item,) = args
        if typing.get_origin(item) in (tuple, Tuple):
            value_type = typing.get_args(item)[1]
            return [(k, _from_host(value_type, v, f"{where}.{k}")) for k, v in value.items()]
        return [_from_host(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        spellings = {_enum_to_host(m): m for m in tp}
        if value not in spellings:
            raise ValueError(
                f"host JSON: `{where}`: {value!r} is not one of {sorted(spellings)}"
            )
        return spellings[value]
    return value


def _to_host(tp: Any, value: Any) -> Any:
    """A value of the generated type ``tp`` → host JSON (the inverse of
    ``_from_host``, leaving out the fields the host leaves out when empty)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        out = {}
        for f in dataclasses.fields(tp):
            v = _to_host(hints[f.name], getattr(value, f.name))
            if (tp, f.name) in _OMITTED_WHEN_EMPTY and v in (None, [], {}):
                continue
            out[_camel(f.name)] = v
        return out
    if origin is typing.Union:
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _to_host(inner[0], value)
    if origin in (list, List):
        (item,) = args
        if typing.get_origin(item) in (tuple, Tuple):
            value_type = typing.get_args(item)[1]
            return {k: _to_host(value_type, v) for k, v in value}
        return [_to_host(item, v) for v in value]
    if isinstance(value, enum.Enum):
        return _enum_to_host(value)
    return value


def request_from_host(obj: Dict[str, Any]) -> Request:
    """A request in the host's JSON (``job``, ``cluster``, ``usage``; ``placement``
    optional, else the initial one) → a :class:`Request` with every part given, the
    fleets, shares and borrowed GPUs as the host shows them today (one fleet
    ``default``, no shares, nothing borrowed)."""
    job = _from_host(Job, obj["job"], "job")
    cluster = _from_host(
        Cluster, obj.get("cluster") or {"gpuNodeLabel": "", "series": []}, "cluster"
    )
    return Request.from_parts(
        job=job,
        cluster=cluster,
        fleets=[single_fleet(cluster)],
        usage=_from_host(List[SeriesUsage], obj.get("usage") or [], "usage"),
        shares=[],
        placement=(
            _from_host(Placement, obj["placement"], "placement")
            if obj.get("placement") is not None
            else initial_placement(job)
        ),
    )


def decision_to_host(decision: Decision, given: Placement) -> Dict[str, Any]:
    """A decision → the host's JSON, as the host records it after the call:
    ``{"kind": "admit", "placement", "priorityCap"?, "preemptible"?}`` (an admit
    without a placement hands on ``given``, the placement the policy was shown),
    ``{"kind": "queue", "code", "message"}``, ``{"kind": "reject", "code", "message",
    "field"?}``."""
    if isinstance(decision, Decision_Admit):
        out: Dict[str, Any] = {
            "kind": "admit",
            "placement": _to_host(Placement, placed(decision, given)),
        }
        if decision.value.priority_cap is not None:
            out["priorityCap"] = decision.value.priority_cap
        if decision.value.preemptible is not None:
            out["preemptible"] = decision.value.preemptible
        return out
    if isinstance(decision, Decision_Queue):
        return {"kind": "queue", "code": decision.value.code, "message": decision.value.message}
    if isinstance(decision, Decision_Reject):
        return {"kind": "reject", **_to_host(Rejection, decision.value)}
    raise TypeError(f"not a decision: {decision!r}")
