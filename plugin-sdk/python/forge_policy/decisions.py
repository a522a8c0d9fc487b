"""Building a policy's answer: admit with a placement, queue with a hold, reject with a
stable code, a message saying what to change and the field it is about."""

from typing import Optional

from .contract import (
    Decision,
    Decision_Admit,
    Decision_Queue,
    Decision_Reject,
    Hold,
    Placement,
    Rejection,
)


def admit(placement: Placement) -> Decision:
    """The job may run with this placement (usually ``request.placement``, possibly
    extended)."""
    return Decision_Admit(placement)


def queue(code: str, message: str) -> Decision:
    """The job waits and is re-evaluated when capacity or usage changes. ``code`` is a
    stable identifier (``[a-z0-9.-]``)."""
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
