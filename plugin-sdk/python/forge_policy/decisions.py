"""Building a policy's answers: admit (with the placement it was given, or a changed
one, optionally capping the job's priority or keeping it from being preempted), queue
with a hold, reject with a stable code, a message saying what to change and the field
it is about; and the verdicts on a planned preemption: accept, reorder, veto."""

from typing import Iterable, Optional

from .contract import (
    Admission,
    Decision,
    Decision_Admit,
    Decision_Queue,
    Decision_Reject,
    Hold,
    Placement,
    PlanVerdict,
    PlanVerdict_Accept,
    PlanVerdict_Reorder,
    PlanVerdict_Veto,
    Rejection,
)


def admit(
    placement: Optional[Placement] = None,
    *,
    priority_cap: Optional[int] = None,
    preemptible: Optional[bool] = None,
) -> Decision:
    """The job may run. Without ``placement``, with the placement this policy was given,
    unchanged (nothing is copied back to the host); with one (``request.placement``,
    extended), the next policy sees that one.

    ``priority_cap``: the job runs at no more than this priority (the chain keeps the
    lowest cap). ``preemptible=False``: the job may not be preempted (global policies
    only; a team's policy that says so fails the admission closed). ``None`` leaves
    either to the host."""
    return Decision_Admit(
        Admission(placement=placement, priority_cap=priority_cap, preemptible=preemptible)
    )


BORROWED_GPUS_ANNOTATION = "forge.dev/borrowed-gpus"
"""The pod annotation that marks an admission as borrowing: GPUs beyond the team's
guaranteed quota (contract 0.3.0 has no field for it)."""


def borrowing(placement: Placement, gpus: int, *, priority_cap: Optional[int] = None) -> Decision:
    """``admit``, marked as running ``gpus`` GPUs beyond the team's guaranteed quota (on
    idle GPUs): the host may reclaim them — preempting this job, least lost work first —
    for a team whose guarantee covers its job. Every pool of ``placement`` (start from
    ``request.placement``) carries the mark as the pods' ``BORROWED_GPUS_ANNOTATION``."""
    for pool in placement.pools:
        kept = [(k, v) for (k, v) in pool.annotations if k != BORROWED_GPUS_ANNOTATION]
        pool.annotations = kept + [(BORROWED_GPUS_ANNOTATION, str(gpus))]
    return admit(placement, priority_cap=priority_cap)


def queue(code: str, message: str) -> Decision:
    """The job waits and is re-evaluated when capacity, usage or shares change.
    ``code`` is a stable identifier (``[a-z0-9.-]``)."""
    return Decision_Queue(Hold(code=code, message=message))


def reject(code: str, message: str, field: Optional[str] = None) -> Decision:
    """The job is refused. ``field`` is the JSON path it is about, e.g.
    ``pools[1].series``."""
    return Decision_Reject(Rejection(code=code, message=message, field=field))


def decision_kind(decision: Decision) -> str:
    """``admit``, ``queue`` or ``reject``."""
    if isinstance(decision, Decision_Admit):
        return "admit"
    if isinstance(decision, Decision_Queue):
        return "queue"
    if isinstance(decision, Decision_Reject):
        return "reject"
    raise TypeError(f"not a decision: {decision!r}")


def placed(decision: Decision, given: Placement) -> Optional[Placement]:
    """The placement an admit hands on to the next policy: its own, or ``given`` (the
    placement the policy was shown) when it admitted unchanged. ``None`` for queue and
    reject."""
    if isinstance(decision, Decision_Admit):
        own = decision.value.placement
        return own if own is not None else given
    return None


def accept() -> PlanVerdict:
    """Preempt in the host's order (what a policy without an opinion answers)."""
    return PlanVerdict_Accept()


def reorder(job_ids: Iterable[str]) -> PlanVerdict:
    """Preempt in this order: the same job ids as the plan's candidates (global
    policies only)."""
    return PlanVerdict_Reorder(list(job_ids))


def veto(code: str, message: str) -> PlanVerdict:
    """No preemption for this job now: it keeps waiting with this hold."""
    return PlanVerdict_Veto(Hold(code=code, message=message))
