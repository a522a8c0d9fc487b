"""The request a policy decides about, and helpers to read it and to extend a placement,
so policies read like the rules they implement (the same helpers as the Rust and
TypeScript SDKs).

In contract 0.3.0 the host hands ``evaluate`` a borrowed handle to the request and the
plugin reads it part by part: :class:`Request` reads a part from the host the first
time the policy touches it and keeps it for the rest of the call, so a policy that
only looks at the job never pays for copying the cluster snapshot. Natively (the
harness), every part is given up front."""

from functools import cached_property
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .contract import (
    Cluster,
    Fleet,
    Job,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Placement,
    Pool,
    PoolPlacement,
    SelectorOperator,
    SeriesCapacity,
    SeriesUsage,
    Taint,
    TeamShare,
    Toleration,
    TolerationOperator,
)


class Request:
    """One admission's inputs: the job, the cluster, the fleets, the team's usage, the
    teams' shares and the placement so far. Each attribute is read on first access
    (from the host inside a component) and kept. Valid only during the ``evaluate``
    call it was passed to: do not keep it."""

    def __init__(self, read: Callable[[str], Any]) -> None:
        """A request whose part named ``part`` (``"job"``, ``"cluster"``, …) is
        ``read(part)``, called at most once per part; usually :meth:`from_host` or
        :meth:`from_parts`."""
        self._read = read

    @classmethod
    def from_host(cls, handle: Any) -> "Request":
        """A request read through the host's ``request`` resource ``handle`` (what the
        component's ``evaluate`` receives): ``handle.job()`` and so on, once each."""
        return cls(lambda part: getattr(handle, part)())

    @classmethod
    def from_parts(
        cls,
        *,
        job: Job,
        cluster: Cluster,
        fleets: List[Fleet],
        usage: List[SeriesUsage],
        shares: List[TeamShare],
        placement: Placement,
    ) -> "Request":
        """A request with every part given (the native harness)."""
        parts = {
            "job": job,
            "cluster": cluster,
            "fleets": fleets,
            "usage": usage,
            "shares": shares,
            "placement": placement,
        }
        return cls(parts.__getitem__)

    @cached_property
    def job(self) -> Job:
        """The job being placed."""
        return self._read("job")

    @cached_property
    def cluster(self) -> Cluster:
        """The cluster snapshot, every fleet summed."""
        return self._read("cluster")

    @cached_property
    def fleets(self) -> List[Fleet]:
        """The fleets behind the gateway, each with its own capacity (one, ``default``,
        on a single-cluster gateway)."""
        return self._read("fleets")

    @cached_property
    def usage(self) -> List[SeriesUsage]:
        """The job's team's usage, one entry per series it uses."""
        return self._read("usage")

    @cached_property
    def shares(self) -> List[TeamShare]:
        """Fair-share standing per team and series (a team's own policies see only
        their team's entries)."""
        return self._read("shares")

    @cached_property
    def placement(self) -> Placement:
        """The placement so far in the chain. To change it, extend it and return
        ``admit(request.placement)``; to keep it, return ``admit()``."""
        return self._read("placement")


def pool_gpus(pool: Pool) -> int:
    """GPUs of one pool: machines times GPUs per machine."""
    return pool.nodes * pool.gpus_per_node


def total_nodes(job: Job) -> int:
    """Machines over all pools."""
    return sum(p.nodes for p in job.pools)


def total_gpus(job: Job) -> int:
    """GPUs over all pools."""
    return sum(pool_gpus(p) for p in job.pools)


def job_label(job: Job, key: str) -> Optional[str]:
    """Value of a job label, if set."""
    for k, v in job.labels:
        if k == key:
            return v
    return None


def series_capacity(request: Request, series: str) -> Optional[SeriesCapacity]:
    """Capacity of one series over every fleet, if any node carries it (reads the
    cluster)."""
    for s in request.cluster.series:
        if s.series == series:
            return s
    return None


def running_gpus(request: Request, series: str) -> int:
    """GPUs the team has running on a series (reads the usage)."""
    return sum(u.running for u in request.usage if u.series == series)


def pool_series(request: Request, index: int) -> Optional[str]:
    """The series of pool ``index`` as placed so far, else as requested (reads the
    placement and the job)."""
    placed = request.placement.pools[index].series
    return placed if placed is not None else request.job.pools[index].series


def gpus_by_series(request: Request) -> List[Tuple[Optional[str], int]]:
    """GPUs this job needs per series, as placed so far (pools without a series count
    under ``None``), in the order the series first appear."""
    out: List[Tuple[Optional[str], int]] = []
    for i, pool in enumerate(request.job.pools):
        series = pool_series(request, i)
        for j, (s, n) in enumerate(out):
            if s == series:
                out[j] = (s, n + pool_gpus(pool))
                break
        else:
            out.append((series, pool_gpus(pool)))
    return out


def _upsert(pairs: List[Tuple[str, str]], key: str, value: str) -> None:
    for i, (k, _) in enumerate(pairs):
        if k == key:
            pairs[i] = (key, value)
            return
    pairs.append((key, value))


def set_node_selector(placement: PoolPlacement, key: str, value: str) -> None:
    """Set (or replace) a node-selector entry of a pool."""
    _upsert(placement.node_selector, key, value)


def set_label(placement: PoolPlacement, key: str, value: str) -> None:
    """Set (or replace) a label of a pool's pods."""
    _upsert(placement.labels, key, value)


def set_ray_resource(placement: PoolPlacement, name: str, amount: float) -> None:
    """Set (or replace) a Ray custom resource of a pool."""
    for i, (k, _) in enumerate(placement.ray_resources):
        if k == name:
            placement.ray_resources[i] = (name, amount)
            return
    placement.ray_resources.append((name, amount))


def toleration_of(taint: Taint) -> Toleration:
    """The toleration of exactly ``taint`` (key, value and effect)."""
    return Toleration(
        key=taint.key,
        operator=TolerationOperator.EQUAL if taint.value is not None else TolerationOperator.EXISTS,
        value=taint.value,
        effect=taint.effect,
    )


def tolerate(placement: PoolPlacement, toleration: Toleration) -> None:
    """Add a toleration to a pool's pods (once). Only global policies may add
    tolerations; a team policy that does fails the admission closed."""
    if toleration not in placement.tolerations:
        placement.tolerations.append(toleration)


def require_label_in(placement: PoolPlacement, key: str, values: Sequence[str]) -> None:
    """Require every pod of the pool to run on nodes whose label ``key`` is one of
    ``values`` (added to each required term, or as the only term). Narrowing: a team
    policy may do this."""
    terms = placement.affinity.required
    if not terms:
        terms.append(NodeSelectorTerm(match_expressions=[]))
    for term in terms:
        term.match_expressions.append(
            NodeSelectorRequirement(key=key, operator=SelectorOperator.IS_IN, values=list(values))
        )
