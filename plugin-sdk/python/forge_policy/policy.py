"""The :class:`Policy` base class: settings type, semantic settings check, decision."""

import dataclasses
from typing import Generic, Type, TypeVar

from .contract import Decision, Request
from .settings import parse_settings

S = TypeVar("S")


@dataclasses.dataclass
class NoSettings:
    """Settings of a policy that takes none (only ``{}`` is accepted)."""


class Policy(Generic[S]):
    """A policy: a settings dataclass plus a pure decision function.

    Subclasses set ``Settings`` to a dataclass (fields with defaults are optional in
    the JSON document; unknown fields are refused), may override :meth:`validate` for
    checks beyond parsing, and implement :meth:`evaluate`::

        @dataclass
        class Settings:
            max_nodes: int = 1

        class MaxNodes(Policy[Settings]):
            Settings = Settings

            def validate(self, s: Settings) -> None:
                if s.max_nodes < 1:
                    raise SettingsError("max_nodes must be at least 1")

            def evaluate(self, s: Settings, request: Request) -> Decision:
                ...
    """

    Settings: Type = NoSettings

    def validate(self, settings: S) -> None:
        """Semantic checks beyond parsing: raise ``SettingsError`` naming the
        setting."""

    def evaluate(self, settings: S, request: Request) -> Decision:
        """Decide about one job: ``admit(request.placement)`` (possibly extended),
        ``queue(code, message)`` or ``reject(code, message, field)``."""
        raise NotImplementedError

    def parse(self, text: str) -> S:
        """Parse a settings document (no semantic checks)."""
        return parse_settings(self.Settings, text)

    def check(self, text: str) -> S:
        """Parse and validate a settings document, as the host's
        ``validate-settings`` does. Raises ``SettingsError``."""
        settings = self.parse(text)
        self.validate(settings)
        return settings
