"""The :class:`Policy` base class: settings type, semantic settings check, decision, and
the answer to a planned preemption."""

import dataclasses
from typing import Generic, Type, TypeVar

from .contract import Decision, PlanVerdict, PreemptionPlan
from .decisions import accept
from .requests import Request
from .settings import parse_settings

S = TypeVar("S")


@dataclasses.dataclass
class NoSettings:
    """Settings of a policy that takes none (only ``{}`` is accepted)."""


class Policy(Generic[S]):
    """A policy: a settings dataclass plus a pure decision function.

    Subclasses set ``Settings`` to a dataclass (fields with defaults are optional in
    the JSON document; unknown fields are refused), may override :meth:`validate` for
    checks beyond parsing and :meth:`plan_preemption`, and implement
    :meth:`evaluate`::

        @dataclass
        class Settings:
            max_nodes: int = 1

        class MaxNodes(Policy[Settings]):
            Settings = Settings

            def validate(self, s: Settings) -> None:
                if s.max_nodes < 1:
                    raise SettingsError("max_nodes must be at least 1")

            def evaluate(self, s: Settings, request: Request) -> Decision:
                if total_nodes(request.job) > s.max_nodes:
                    return reject("nodes.too-many", "...", "pools")
                return admit()

    Inside a component the settings are parsed and checked once per instance (the
    contract's ``configure``) and every call gets the parsed value.
    """

    Settings: Type = NoSettings

    def validate(self, settings: S) -> None:
        """Semantic checks beyond parsing: raise ``SettingsError`` naming the
        setting."""

    def evaluate(self, settings: S, request: Request) -> Decision:
        """Decide about one job: ``admit()`` (as placed so far),
        ``admit(request.placement)`` after extending it, ``queue(code, message)`` or
        ``reject(code, message, field)``. Read only the parts of ``request`` the rule
        needs: each is copied from the host on first use.

        The decision must depend only on ``settings`` and ``request``, never on an
        earlier call: the host reuses an instance for later calls of the same plugin,
        settings and team."""
        raise NotImplementedError

    def plan_preemption(self, settings: S, plan: PreemptionPlan) -> PlanVerdict:
        """Accept, reorder or veto a preemption the host plans for a higher-priority
        job (``plan.candidates`` in the host's order, least lost work first):
        ``accept()``, ``reorder(job_ids)`` or ``veto(code, message)``. The default
        accepts. A team's policy is asked only about its own team's jobs and may only
        accept or veto."""
        return accept()

    def parse(self, text: str) -> S:
        """Parse a settings document (no semantic checks)."""
        return parse_settings(self.Settings, text)

    def check(self, text: str) -> S:
        """Parse and validate a settings document, as the host's
        ``validate-settings`` and ``configure`` do. Raises ``SettingsError``."""
        settings = self.parse(text)
        self.validate(settings)
        return settings
