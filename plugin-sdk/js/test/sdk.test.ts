/** The TypeScript SDK's own behaviour: settings errors name the setting, decisions and
 * host-JSON conversion round-trip, logs are captured by the harness. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SettingsError, admit, definePolicy, gpusBySeries, log, parseSettings, queue, reject, z } from 'forge-policy';
import { Harness, RequestBuilder, decisionToHost, requestFromHost } from 'forge-policy/harness';

const S = z.strictObject({
  name: z.string().default('x'),
  tags: z.array(z.string()).default([]),
  inner: z.strictObject({ limit: z.number().int().default(1) }).default({ limit: 1 }),
});

test('settings errors name the setting', () => {
  const cases: Array<[string, string]> = [
    ['{x', 'invalid settings: not JSON: '],
    ['[1]', 'invalid settings: expected a JSON object, got array'],
    ['{"nam": "y"}', 'invalid settings: unknown field `nam`'],
    ['{"name": 3}', 'invalid settings: name: expected string, got 3'],
    ['{"tags": "a"}', 'invalid settings: tags: expected array, got "a"'],
    ['{"inner": {"limit": "lots"}}', 'invalid settings: inner.limit: expected number, got "lots"'],
    ['{"inner": {"limt": 1}}', 'invalid settings: inner: unknown field `limt`'],
  ];
  for (const [text, message] of cases) {
    assert.throws(
      () => parseSettings(S, text),
      (e: unknown) => e instanceof SettingsError && e.message.startsWith(message),
      text,
    );
  }
  assert.deepEqual(parseSettings(S, ' '), { name: 'x', tags: [], inner: { limit: 1 } });
});

test('the harness captures logs and checks settings', () => {
  const policy = definePolicy({
    settings: S,
    evaluate(_s, req) {
      log.info(`${req.job.name}: ${JSON.stringify(gpusBySeries(req))}`);
      return queue('x.wait', 'later');
    },
  });
  const h = new Harness(policy);
  const d = h.evaluate(new RequestBuilder().name('n').pool('a', 2, 4, 'h100').pool('b', 1, 8).build());
  assert.equal(d.tag, 'queue');
  assert.deepEqual(h.logs, [['info', 'n: [["h100",8],[null,8]]']]);
  assert.throws(() => new Harness(policy, '{"bogus": 1}'), SettingsError);
});

test('host JSON round trip', () => {
  const req = new RequestBuilder().label('k', 'v').pool('a', 1, 8, 'h100').series('h100', 16, 8, 2).build();
  const host = {
    job: {
      id: 'job-1', team: 'team-a', name: 'train', framework: 'nemo-rl', priority: 0, storage: 'shared',
      labels: { k: 'v' }, pools: [{ name: 'a', nodes: 1, gpusPerNode: 8, series: 'h100' }],
    },
    cluster: {
      gpuNodeLabel: 'starforge/gpu-series',
      series: [{ series: 'h100', total: 16, allocatable: 16, inUse: 8, blocked: 0, free: 8, largestFreeBlock: 8, nodes: 2 }],
    },
    usage: [],
  };
  assert.deepEqual(requestFromHost(host), req);
  assert.deepEqual(decisionToHost(reject('a.b', 'm')), { kind: 'reject', code: 'a.b', message: 'm' });
  assert.deepEqual(decisionToHost(admit(req.placement)), {
    kind: 'admit',
    placement: { pools: [{ pool: 'a', series: 'h100', nodeSelector: {}, rayResources: {}, labels: {}, annotations: {} }] },
  });
});
