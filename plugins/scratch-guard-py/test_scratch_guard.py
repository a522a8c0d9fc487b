"""scratch-guard (Python) against the shared table, and its own edge cases: what it
reads from the host, and the placement it hands on."""

import json
from pathlib import Path

import pytest

from forge_policy import Request, decision_kind
from forge_policy.harness import (
    Harness,
    RequestBuilder,
    decision_to_host,
    evaluate_unchecked,
    request_from_host,
    validate,
)
from forge_policy.settings import SettingsError
from scratch_guard import ScratchGuard

CASES = json.loads(
    (Path(__file__).resolve().parents[2] / "tests/fixtures/plugins/scratch-guard-cases.json").read_text()
)
SETTINGS = json.dumps(CASES["settings"])


@pytest.mark.parametrize("case", CASES["decisions"], ids=lambda c: c["name"])
def test_shared_table_decisions(case):
    h = Harness(ScratchGuard, SETTINGS)
    req = request_from_host(case["request"])
    assert decision_to_host(h.evaluate(req), req.placement) == case["expect"]


@pytest.mark.parametrize("case", CASES["invalidSettings"], ids=lambda c: json.dumps(c["settings"]))
def test_shared_table_invalid_settings(case):
    message = validate(ScratchGuard, json.dumps(case["settings"]))
    assert message is not None
    if "message" in case:
        assert message == case["message"]
    else:
        assert case["mentions"] in message, message


@pytest.mark.parametrize("case", CASES["traps"], ids=lambda c: c["name"])
def test_shared_table_traps(case):
    with pytest.raises(SettingsError):
        evaluate_unchecked(ScratchGuard, json.dumps(case["settings"]), request_from_host(case["request"]))


def test_defaults_apply_and_other_prefixes_work():
    assert validate(ScratchGuard, "") is None
    h = Harness(ScratchGuard, '{"prefix": "dbg-", "max_gpus": 4}')
    ok = RequestBuilder().name("tmp-x").pool("train", 1, 8, "a100").build()
    assert decision_kind(h.evaluate(ok)) == "admit"
    big = RequestBuilder().name("dbg-x").pool("train", 1, 8, "a100").series("a100", 8, 8, 1).build()
    assert decision_kind(h.evaluate(big)) == "reject"


def test_every_pool_is_labelled():
    h = Harness(ScratchGuard, SETTINGS)
    req = (
        RequestBuilder()
        .name("tmp-two")
        .pool("train", 1, 4, "a100")
        .pool("rollout", 1, 4, "a100")
        .series("a100", 32, 16, 4)
        .build()
    )
    placement = h.placed(req)
    assert [dict(p.labels) for p in placement.pools] == [{"forge.io/scratch": "true"}] * 2


def test_other_jobs_read_only_the_job_and_hand_the_placement_on_unchanged():
    read = []
    parts = RequestBuilder().name("train-llm").pool("train", 2, 8, "h100").build()
    req = Request(lambda part: read.append(part) or getattr(parts, part))
    decision = Harness(ScratchGuard, SETTINGS).evaluate(req)
    assert decision.value.placement is None, "admitted as placed so far: nothing copied back"
    assert read == ["job"]
