"""Forge policy SDK for Python.

Write an admission policy as a subclass of :class:`Policy` with a dataclass for its
settings; ``forge-plugin build`` turns the module into a WebAssembly component that
targets the same WIT contract as the Rust SDK (the ``wit/policy@X.Y.Z`` folder named
in ``plugin-sdk/sdk.toml``, today ``policy@0.3.0``), and ``forge-plugin test`` runs its
pytest tests natively with :mod:`forge_policy.harness`.

The request is a :class:`Request` whose parts (``job``, ``cluster``, ``fleets``,
``usage``, ``shares``, ``placement``) are read from the host on first access: a policy
pays only for what it reads. ``admit()`` lets a job through as placed so far (nothing
is copied back), ``admit(placement)`` with a changed placement. The record and
decision types are the ones componentize-py generates from the WIT
(``wit_world.imports.types``), re-exported here.
"""

from .contract import *  # noqa: F401,F403 (the contract's types)
from .contract import __all__ as _contract_names
from .decisions import (
    BORROWED_GPUS_ANNOTATION,
    accept,
    admit,
    borrowing,
    decision_kind,
    placed,
    queue,
    reject,
    reorder,
    veto,
)
from .policy import Policy
from .requests import (
    Request,
    gpus_by_series,
    job_label,
    pool_gpus,
    pool_series,
    require_label_in,
    running_gpus,
    series_capacity,
    set_label,
    set_node_selector,
    set_ray_resource,
    tolerate,
    toleration_of,
    total_gpus,
    total_nodes,
)
from .settings import SettingsError, parse_settings
from . import log

__all__ = [
    *_contract_names,
    "Policy",
    "Request",
    "SettingsError",
    "accept",
    "admit",
    "decision_kind",
    "gpus_by_series",
    "job_label",
    "log",
    "parse_settings",
    "placed",
    "pool_gpus",
    "pool_series",
    "queue",
    "reject",
    "reorder",
    "require_label_in",
    "running_gpus",
    "series_capacity",
    "set_label",
    "set_node_selector",
    "set_ray_resource",
    "tolerate",
    "toleration_of",
    "total_gpus",
    "total_nodes",
    "veto",
]
