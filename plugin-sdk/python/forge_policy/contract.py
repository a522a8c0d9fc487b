"""The contract's types, as componentize-py generates them from the WIT folder named in
``plugin-sdk/sdk.toml`` (inside a component, the generated module is built in; natively,
``forge-plugin test`` puts the same generated bindings on the path)."""

from wit_world.imports.host import Level
from wit_world.imports.types import (
    Cluster,
    Decision,
    Decision_Admit,
    Decision_Queue,
    Decision_Reject,
    Hold,
    Job,
    Placement,
    Pool,
    PoolPlacement,
    Rejection,
    Request,
    SeriesCapacity,
    SeriesUsage,
    StorageMode,
)

__all__ = [
    "Cluster",
    "Decision",
    "Decision_Admit",
    "Decision_Queue",
    "Decision_Reject",
    "Hold",
    "Job",
    "Level",
    "Placement",
    "Pool",
    "PoolPlacement",
    "Rejection",
    "Request",
    "SeriesCapacity",
    "SeriesUsage",
    "StorageMode",
]
