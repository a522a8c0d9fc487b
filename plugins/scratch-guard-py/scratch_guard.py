"""scratch-guard: keep throw-away jobs off reserved GPUs and out of the way.

A *scratch* job is one whose name starts with ``prefix`` (``tmp-``). Scratch jobs may
not run on ``reserved`` series (rejected at the pool that asks for one), may use at
most ``max_gpus`` GPUs (rejected), and only run on idle GPUs: while a series has fewer
free GPUs than the job needs there, the job is queued. Admitted scratch jobs have
their pods labelled ``<label>=true`` (setting ``label``, default ``forge.io/scratch``;
as a team plugin, a key under ``<team>.teams.forge.dev/``, the only labels a team link
may add). Other jobs pass unchanged: for them only the job is read from the host, and
the admit hands the placement on without copying it back.

The same rule as the Rust crate ``plugins/scratch-guard`` and the TypeScript plugin
``plugins/scratch-guard-ts``; all three answer the table in
``tests/fixtures/plugins/scratch-guard-cases.json`` identically.

Settings: ``{"prefix": "tmp-", "reserved": ["h100"], "max_gpus": 16}``
"""

from dataclasses import dataclass, field
from typing import List

from forge_policy import (
    Decision,
    Policy,
    Request,
    SettingsError,
    admit,
    gpus_by_series,
    pool_series,
    queue,
    reject,
    series_capacity,
    set_label,
    total_gpus,
)


@dataclass
class Settings:
    prefix: str = "tmp-"
    reserved: List[str] = field(default_factory=list)
    max_gpus: int = 16
    label: str = "forge.io/scratch"


class ScratchGuard(Policy[Settings]):
    Settings = Settings

    def validate(self, s: Settings) -> None:
        if not s.prefix:
            raise SettingsError("prefix must not be empty")
        for i, series in enumerate(s.reserved):
            if not series.strip():
                raise SettingsError(f"reserved[{i}] must not be empty")
        if s.max_gpus < 1:
            raise SettingsError("max_gpus must be at least 1")

    def evaluate(self, s: Settings, req: Request) -> Decision:
        job = req.job
        if not job.name.startswith(s.prefix):
            return admit()
        for i in range(len(job.pools)):
            series = pool_series(req, i)
            if series is not None and series in s.reserved:
                return reject(
                    "scratch.reserved-series",
                    f"scratch job `{job.name}` (its name starts with `{s.prefix}`) may not use "
                    f"the reserved series {series}; use another series or rename the job",
                    f"pools[{i}].series",
                )
        total = total_gpus(job)
        if total > s.max_gpus:
            return reject(
                "scratch.too-large",
                f"scratch jobs may use at most {s.max_gpus} GPUs; this one asks for {total}",
                "pools",
            )
        for series, needed in gpus_by_series(req):
            if series is None:
                continue
            capacity = series_capacity(req, series)
            free = capacity.free if capacity is not None else 0
            if free < needed:
                return queue(
                    "scratch.idle-only",
                    f"scratch jobs only use idle GPUs: {series} has {free} free, "
                    f"this job needs {needed}",
                )
        placement = req.placement
        for pool in placement.pools:
            set_label(pool, s.label, "true")
        return admit(placement)
