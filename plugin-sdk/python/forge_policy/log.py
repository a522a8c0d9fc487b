"""Logging from a policy: the host's ``log`` import inside a component (tagged with the
plugin's name and digest; at most 64 lines of 1 KiB per evaluation), a capture buffer
when the policy runs natively under the harness."""

from typing import List, Optional, Tuple

from .contract import Level

_captured: Optional[List[Tuple[str, str]]] = None


def _capture(buffer: Optional[List[Tuple[str, str]]]) -> None:
    """Send log lines to ``buffer`` instead of the host (the harness does this)."""
    global _captured
    _captured = buffer


def write(level: Level, message: str) -> None:
    """Write one line at ``level``."""
    if _captured is not None:
        _captured.append((level.name.lower(), message))
        return
    from wit_world.imports import host

    host.log(level, message)


def debug(message: str) -> None:
    write(Level.DEBUG, message)


def info(message: str) -> None:
    write(Level.INFO, message)


def warn(message: str) -> None:
    write(Level.WARN, message)


def error(message: str) -> None:
    write(Level.ERROR, message)
