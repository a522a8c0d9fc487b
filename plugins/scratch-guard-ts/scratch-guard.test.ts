/** scratch-guard (TypeScript) against the shared table, and its own edge cases. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';

import { Request, SettingsError } from 'forge-policy';
import {
  Harness,
  RequestBuilder,
  decisionToHost,
  evaluateUnchecked,
  requestFromHost,
  validate,
} from 'forge-policy/harness';

import policy from './scratch-guard.ts';

interface Cases {
  settings: unknown;
  decisions: Array<{ name: string; request: Record<string, unknown>; expect: unknown }>;
  invalidSettings: Array<{ settings: unknown; message?: string; mentions?: string }>;
  traps: Array<{ name: string; settings: unknown; request: Record<string, unknown> }>;
}

// FORGE_WORKSPACE is set by `forge-plugin test` (the bundled test runs from target/).
const root = process.env.FORGE_WORKSPACE ?? new URL('../..', import.meta.url).pathname;
const CASES: Cases = JSON.parse(
  readFileSync(`${root}/tests/fixtures/plugins/scratch-guard-cases.json`, 'utf8'),
);
const SETTINGS = JSON.stringify(CASES.settings);

describe('shared table', () => {
  for (const c of CASES.decisions) {
    test(c.name, () => {
      const h = new Harness(policy, SETTINGS);
      const req = requestFromHost(c.request);
      assert.deepEqual(decisionToHost(h.evaluate(req), req.placement), c.expect);
    });
  }
  for (const c of CASES.invalidSettings) {
    test(`invalid settings ${JSON.stringify(c.settings)}`, () => {
      const message = validate(policy, JSON.stringify(c.settings));
      assert.ok(message !== undefined, 'must be refused');
      if (c.message !== undefined) assert.equal(message, c.message);
      else assert.ok(message.includes(c.mentions ?? ''), message);
    });
  }
  for (const c of CASES.traps) {
    test(c.name, () => {
      assert.throws(
        () => evaluateUnchecked(policy, JSON.stringify(c.settings), requestFromHost(c.request)),
        SettingsError,
      );
    });
  }
});

test('defaults apply and other prefixes work', () => {
  assert.equal(validate(policy, ''), undefined);
  const h = new Harness(policy, '{"prefix": "dbg-", "max_gpus": 4}');
  const ok = new RequestBuilder().name('tmp-x').pool('train', 1, 8, 'a100').build();
  assert.equal(h.evaluate(ok).tag, 'admit');
  const big = new RequestBuilder().name('dbg-x').pool('train', 1, 8, 'a100').series('a100', 8, 8, 1).build();
  assert.equal(h.evaluate(big).tag, 'reject');
});

test('every pool is labelled', () => {
  const h = new Harness(policy, SETTINGS);
  const req = new RequestBuilder()
    .name('tmp-two')
    .pool('train', 1, 4, 'a100')
    .pool('rollout', 1, 4, 'a100')
    .series('a100', 32, 16, 4)
    .build();
  const d = h.evaluate(req);
  assert.equal(d.tag, 'admit');
  if (d.tag === 'admit') {
    assert.deepEqual(
      d.val.placement?.pools.map((p) => p.labels),
      [[['forge.io/scratch', 'true']], [['forge.io/scratch', 'true']]],
    );
  }
});

test('other jobs are admitted as placed, reading only the job', () => {
  const h = new Harness(policy, SETTINGS);
  const given = new RequestBuilder().name('train-llm').pool('train', 2, 8, 'h100').build();
  const read: string[] = [];
  const req = Request.fromHost({
    job: () => (read.push('job'), given.job),
    cluster: () => (read.push('cluster'), given.cluster),
    fleets: () => (read.push('fleets'), given.fleets),
    usage: () => (read.push('usage'), given.usage),
    shares: () => (read.push('shares'), given.shares),
    placement: () => (read.push('placement'), given.placement),
  });
  assert.deepEqual(h.evaluate(req), {
    tag: 'admit',
    val: { placement: undefined, priorityCap: undefined, preemptible: undefined },
  });
  assert.deepEqual(read, ['job']);
});
