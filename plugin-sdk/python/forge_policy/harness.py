"""Native test harness for pytest: run a policy with the same settings parsing and the
same initial placement as in the host, build requests, capture logs, and convert
requests and decisions from and to the host's JSON (the form the gateway's API and
the shared test tables use)::

    h = Harness(MaxNodes, '{"max_nodes": 1}')
    d = h.evaluate(RequestBuilder().pool("train", 2, 8, "h100").build())
    assert decision_kind(d) == "reject"
"""

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
    Job,
    Placement,
    Pool,
    PoolPlacement,
    Request,
    SeriesCapacity,
    SeriesUsage,
    StorageMode,
)
from .policy import Policy
from .settings import SettingsError

S = TypeVar("S")


class Harness(Generic[S]):
    """A policy with parsed and validated settings, run natively."""

    def __init__(self, policy: Type[Policy], settings: str = "{}") -> None:
        self.policy = policy()
        self.settings = self.policy.check(settings)
        self.logs: List[Tuple[str, str]] = []

    def evaluate(self, request: Request) -> Decision:
        """Evaluate one request; log lines are appended to ``self.logs``."""
        log._capture(self.logs)
        try:
            return self.policy.evaluate(self.settings, request)
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
    """What the component's ``evaluate`` does with settings that were never validated:
    raises ``SettingsError`` where the component traps."""
    p = policy()
    log._capture([])
    try:
        return p.evaluate(p.parse(settings), request)
    finally:
        log._capture(None)


class RequestBuilder:
    """Builds a request with the harness defaults of every SDK: job ``job-1`` named
    ``train`` of team ``team-a``, framework ``nemo-rl``, shared storage, node label
    ``starforge/gpu-series``, and the initial placement the host gives the first
    plugin."""

    def __init__(self) -> None:
        self.job = Job(
            id="job-1",
            team="team-a",
            name="train",
            framework="nemo-rl",
            priority=0,
            pools=[],
            storage=StorageMode.SHARED,
            labels=[],
        )
        self.cluster = Cluster(gpu_node_label="starforge/gpu-series", series=[])
        self.usage: List[SeriesUsage] = []

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

    def pool(
        self, name: str, nodes: int, gpus: int, series: Optional[str] = None
    ) -> "RequestBuilder":
        self.job.pools.append(
            Pool(name=name, nodes=nodes, gpus_per_node=gpus, series=series)
        )
        return self

    def series(self, name: str, total: int, free: int, nodes: int) -> "RequestBuilder":
        """A series with ``total`` GPUs on ``nodes`` nodes, ``free`` of them free."""
        largest = min(free, total // nodes) if nodes else 0
        self.cluster.series.append(
            SeriesCapacity(
                series=name,
                total=total,
                allocatable=total,
                in_use=total - min(free, total),
                blocked=0,
                free=free,
                largest_free_block=largest,
                nodes=nodes,
            )
        )
        return self

    def usage_of(self, series: str, running: int, queued: int = 0) -> "RequestBuilder":
        self.usage.append(SeriesUsage(series=series, running=running, queued=queued))
        return self

    def build(self) -> Request:
        return Request(
            job=self.job,
            cluster=self.cluster,
            usage=self.usage,
            placement=initial_placement(self.job),
        )


def initial_placement(job: Job) -> Placement:
    """The placement the host gives the first plugin of a chain."""
    return Placement(
        pools=[
            PoolPlacement(
                pool=p.name,
                series=p.series,
                node_selector=[],
                ray_resources=[],
                labels=[],
                annotations=[],
            )
            for p in job.pools
        ]
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _from_host(tp: Any, value: Any) -> Any:
    """Host JSON → the generated type ``tp``, by its type hints (string maps are JSON
    objects in the host's form, lists of pairs in the contract's)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(
            **{
                f.name: _from_host(hints[f.name], value.get(_camel(f.name)))
                for f in dataclasses.fields(tp)
            }
        )
    if origin is typing.Union:
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _from_host(inner[0], value)
    if origin in (list, List):
        (item,) = args
        if typing.get_origin(item) in (tuple, Tuple):
            value_type = typing.get_args(item)[1]
            return [(k, _from_host(value_type, v)) for k, v in (value or {}).items()]
        return [_from_host(item, v) for v in (value or [])]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp[value.upper().replace("-", "_")]
    return value


def _to_host(tp: Any, value: Any) -> Any:
    """A value of the generated type ``tp`` → host JSON (the inverse of
    ``_from_host``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {
            _camel(f.name): _to_host(hints[f.name], getattr(value, f.name))
            for f in dataclasses.fields(tp)
        }
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
        return value.name.lower().replace("_", "-")
    return value


def request_from_host(obj: Dict[str, Any]) -> Request:
    """A request in the host's JSON (``job``, ``cluster``, ``usage``; ``placement``
    optional, else the initial one) → the generated ``Request``."""
    job = _from_host(Job, obj["job"])
    return Request(
        job=job,
        cluster=_from_host(Cluster, obj.get("cluster") or {"gpuNodeLabel": "", "series": []}),
        usage=_from_host(List[SeriesUsage], obj.get("usage") or []),
        placement=(
            _from_host(Placement, obj["placement"])
            if obj.get("placement") is not None
            else initial_placement(job)
        ),
    )


def decision_to_host(decision: Decision) -> Dict[str, Any]:
    """A decision → the host's JSON (``{"kind": "admit", "placement": ...}``,
    ``{"kind": "queue", "code", "message"}``, ``{"kind": "reject", "code", "message",
    "field"?}``)."""
    if isinstance(decision, Decision_Admit):
        return {"kind": "admit", "placement": _to_host(Placement, decision.value)}
    if isinstance(decision, Decision_Queue):
        return {"kind": "queue", "code": decision.value.code, "message": decision.value.message}
    if isinstance(decision, Decision_Reject):
        out = {"kind": "reject", "code": decision.value.code, "message": decision.value.message}
        if decision.value.field is not None:
            out["field"] = decision.value.field
        return out
    raise TypeError(f"not a decision: {decision!r}")
