"""The Python SDK's own behaviour: settings errors name the setting, decisions and
host-JSON conversion round-trip, logs are captured by the harness."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pytest

from forge_policy import (
    Policy,
    SettingsError,
    admit,
    decision_kind,
    gpus_by_series,
    log,
    parse_settings,
    queue,
    reject,
)
from forge_policy.harness import Harness, RequestBuilder, decision_to_host, request_from_host


@dataclass
class Inner:
    limit: int = 1


@dataclass
class S:
    name: str = "x"
    tags: List[str] = field(default_factory=list)
    limits: Dict[str, int] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    note: Optional[str] = None


@pytest.mark.parametrize(
    "text, message",
    [
        ("{x", "invalid settings: not JSON: "),
        ("[1]", "invalid settings: expected a JSON object, got list"),
        ('{"nam": "y"}', "invalid settings: unknown field `nam`"),
        ('{"name": 3}', 'invalid settings: name: expected str, got 3'),
        ('{"tags": "a"}', 'invalid settings: tags: expected List[str], got "a"'),
        ('{"limits": {"a": true}}', "invalid settings: limits: expected Dict[str, int]"),
        ('{"inner": {"limit": "lots"}}', 'invalid settings: inner.limit: expected int, got "lots"'),
    ],
)
def test_settings_errors_name_the_setting(text, message):
    with pytest.raises(SettingsError) as e:
        parse_settings(S, text)
    assert str(e.value).startswith(message), str(e.value)


def test_empty_settings_are_the_defaults():
    assert parse_settings(S, "  ") == S()
    assert parse_settings(S, '{"note": null, "inner": {"limit": 3}}').inner.limit == 3


class Logs(Policy[S]):
    Settings = S

    def evaluate(self, s, req):
        log.info(f"{req.job.name}: {gpus_by_series(req)}")
        return queue("x.wait", "later")


def test_harness_captures_logs_and_checks_settings():
    h = Harness(Logs)
    d = h.evaluate(RequestBuilder().name("n").pool("a", 2, 4, "h100").pool("b", 1, 8).build())
    assert decision_kind(d) == "queue"
    assert h.logs == [("info", "n: [('h100', 8), (None, 8)]")]
    with pytest.raises(SettingsError):
        Harness(Logs, '{"bogus": 1}')


def test_host_json_round_trip():
    req = RequestBuilder().label("k", "v").pool("a", 1, 8, "h100").series("h100", 16, 8, 2).build()
    host = {
        "job": {
            "id": "job-1", "team": "team-a", "name": "train", "framework": "nemo-rl",
            "priority": 0, "storage": "shared", "labels": {"k": "v"},
            "pools": [{"name": "a", "nodes": 1, "gpusPerNode": 8, "series": "h100"}],
        },
        "cluster": {"gpuNodeLabel": "starforge/gpu-series", "series": [
            {"series": "h100", "total": 16, "allocatable": 16, "inUse": 8, "blocked": 0,
             "free": 8, "largestFreeBlock": 8, "nodes": 2}]},
        "usage": [],
    }
    assert request_from_host(host) == req
    assert decision_to_host(reject("a.b", "m")) == {"kind": "reject", "code": "a.b", "message": "m"}
    placement = decision_to_host(admit(req.placement))["placement"]
    assert placement == {"pools": [{"pool": "a", "series": "h100", "nodeSelector": {},
                                    "rayResources": {}, "labels": {}, "annotations": {}}]}
