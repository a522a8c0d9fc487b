"""Reading a request and extending a placement, so policies read like the rules they
implement (the same helpers as the Rust and TypeScript SDKs)."""

from typing import List, Optional, Tuple

from .contract import Job, Pool, PoolPlacement, Request, SeriesCapacity


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
    """Capacity of one series, if any node carries it."""
    for s in request.cluster.series:
        if s.series == series:
            return s
    return None


def running_gpus(request: Request, series: str) -> int:
    """GPUs the team has running on a series."""
    return sum(u.running for u in request.usage if u.series == series)


def pool_series(request: Request, index: int) -> Optional[str]:
    """The series of pool ``index`` as placed so far, else as requested."""
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
