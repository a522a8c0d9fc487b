"""Forge policy SDK for Python.

Write an admission policy as a subclass of :class:`Policy` with a dataclass for its
settings; ``forge-plugin build`` turns the module into a WebAssembly component that
targets the same WIT contract as the Rust SDK (``wit/policy@X.Y.Z``), and
``forge-plugin test`` runs its pytest tests natively with :mod:`forge_policy.harness`.

The request and decision types are the ones componentize-py generates from the WIT
(``wit_world.imports.types``), re-exported here.
"""

from .contract import *  # noqa: F401,F403 (the contract's types)
from .contract import __all__ as _contract_names
from .decisions import admit, decision_kind, queue, reject
from .policy import Policy
from .requests import (
    gpus_by_series,
    job_label,
    pool_gpus,
    running_gpus,
    series_capacity,
    set_label,
    set_node_selector,
    set_ray_resource,
    total_gpus,
    total_nodes,
)
from .settings import SettingsError, parse_settings
from . import log

__all__ = [
    *_contract_names,
    "Policy",
    "SettingsError",
    "admit",
    "decision_kind",
    "gpus_by_series",
    "job_label",
    "log",
    "parse_settings",
    "pool_gpus",
    "queue",
    "reject",
    "running_gpus",
    "series_capacity",
    "set_label",
    "set_node_selector",
    "set_ray_resource",
    "total_gpus",
    "total_nodes",
]
