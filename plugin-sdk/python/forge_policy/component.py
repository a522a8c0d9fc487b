"""The component's exports: ``forge-plugin build`` generates an entry module that sets
``WitWorld = export(YourPolicy)``, which componentize-py binds to the world's
``validate-settings`` and ``evaluate``."""

from typing import Type

from componentize_py_types import Err

from . import log
from .contract import Decision, Request
from .policy import Policy
from .settings import SettingsError


def export(policy: Type[Policy]) -> type:
    """The world implementation for a :class:`Policy` subclass."""
    instance = policy()

    class WitWorld:
        def validate_settings(self, settings: str) -> None:
            try:
                instance.check(settings)
            except SettingsError as e:
                raise Err(str(e)) from None

        def evaluate(self, settings: str, request: Request) -> Decision:
            # Settings passed validate-settings before the chain was activated; if they
            # no longer parse the plugin fails closed: the exception traps.
            try:
                parsed = instance.parse(settings)
            except SettingsError as e:
                log.error(str(e))
                raise
            return instance.evaluate(parsed, request)

    WitWorld.__name__ = "WitWorld"
    return WitWorld
