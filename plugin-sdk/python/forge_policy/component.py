"""The component's exports: ``forge-plugin build`` generates an entry module that sets
``WitWorld = export(YourPolicy)``, which componentize-py binds to the world's
``validate-settings``, ``configure``, ``evaluate`` and ``plan-preemption``
(``forge:policy/policy@0.3.0``).

The host calls ``configure`` once per instance with the link's settings; the parsed
settings are kept for every later ``evaluate`` and ``plan-preemption`` of the instance.
A call that finds none (the host skipped ``configure``, or it refused the settings)
fails closed: the exception traps."""

from typing import Any, Dict, Type

from componentize_py_types import Err
from wit_world.imports.request_view import Request as HostRequest

from . import log
from .contract import Decision, PlanVerdict, PreemptionPlan
from .policy import Policy
from .requests import Request
from .settings import SettingsError


def export(policy: Type[Policy]) -> type:
    """The world implementation for a :class:`Policy` subclass."""
    instance = policy()
    # The settings `configure` parsed, shared by every WitWorld object (componentize-py
    # may make one per call).
    configured: Dict[str, Any] = {}

    def configured_settings() -> Any:
        if "settings" not in configured:
            message = f"{policy.__name__}: called before configure"
            log.error(message)
            raise RuntimeError(message)
        return configured["settings"]

    class WitWorld:
        def validate_settings(self, settings: str) -> None:
            try:
                instance.check(settings)
            except SettingsError as e:
                raise Err(str(e)) from None

        def configure(self, settings: str) -> None:
            try:
                configured["settings"] = instance.check(settings)
            except SettingsError as e:
                raise Err(str(e)) from None

        def evaluate(self, request: HostRequest) -> Decision:
            return instance.evaluate(configured_settings(), Request.from_host(request))

        def plan_preemption(self, plan: PreemptionPlan) -> PlanVerdict:
            return instance.plan_preemption(configured_settings(), plan)

    WitWorld.__name__ = "WitWorld"
    return WitWorld
