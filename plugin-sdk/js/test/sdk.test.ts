/** The TypeScript SDK's own behaviour: settings errors name the setting, the request is
 * read lazily and once per part, the component's exports configure once and fail
 * closed without settings, decisions and verdicts are built as the contract says,
 * requests and decisions round-trip through the host's JSON, logs are captured by the
 * harness. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  BORROWED_GPUS_ANNOTATION,
  Request,
  type RequestParts,
  SettingsError,
  admit,
  borrowing,
  definePolicy,
  gpusBySeries,
  log,
  parseSettings,
  placed,
  queue,
  reject,
  reorder,
  requireLabelIn,
  seriesCapacity,
  tolerate,
  tolerationOf,
  veto,
  z,
} from 'forge-policy';
import { exportPolicy } from 'forge-policy/component';
import {
  DEFAULT_CPU_MILLIS,
  DEFAULT_MEMORY_BYTES,
  Harness,
  RequestBuilder,
  decisionToHost,
  evaluateUnchecked,
  requestFromHost,
} from 'forge-policy/harness';

const S = z.strictObject({
  name: z.string().default('x'),
  tags: z.array(z.string()).default([]),
  inner: z.strictObject({ limit: z.number().int().default(1) }).default({ limit: 1 }),
});

const PARTS: Array<keyof RequestParts> = ['job', 'cluster', 'fleets', 'usage', 'shares', 'placement'];

/** A plan to preempt one of two jobs: `old` checkpointed a minute ago, `new` never did. */
const PLAN = {
  preemptor: new RequestBuilder().priority(10).pool('a', 1, 8, 'h100').build().job,
  series: 'h100',
  gpusNeeded: 8,
  candidates: ['old', 'new'].map((jobId) => ({
    jobId,
    team: 'team-b',
    priority: 0,
    gpus: 8,
    series: 'h100',
    fleet: 'default',
    runningSeconds: 3600n,
    checkpointAgeSeconds: jobId === 'old' ? 60n : undefined,
    checkpointStep: jobId === 'old' ? 100n : undefined,
    lostGpuSeconds: jobId === 'old' ? 480 : 28_800,
    graceSeconds: 30,
    preemptionsInWindow: 0,
  })),
};

/** Every part of a request (reads them all). */
function parts(req: Request): RequestParts {
  return Object.fromEntries(PARTS.map((k) => [k, req[k]])) as unknown as RequestParts;
}

/** A host handle over `given` that records which parts are read. */
function countingHandle(given: Request, read: string[]) {
  const at =
    <K extends keyof RequestParts>(k: K) =>
    (): RequestParts[K] => {
      read.push(k);
      return given[k];
    };
  return {
    job: at('job'),
    cluster: at('cluster'),
    fleets: at('fleets'),
    usage: at('usage'),
    shares: at('shares'),
    placement: at('placement'),
  };
}

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
  assert.throws(() => evaluateUnchecked(policy, '{"name": 3}', new RequestBuilder().build()), SettingsError);
});

test('a request reads each part from the host once, when first used', () => {
  const given = new RequestBuilder().pool('a', 1, 8, 'h100').series('h100', 16, 8, 2).build();
  const read: string[] = [];
  const req = Request.fromHost(countingHandle(given, read));
  assert.deepEqual(read, []);
  assert.equal(req.job.pools.length, 1);
  assert.equal(seriesCapacity(req, 'h100')?.free, 8);
  assert.equal(req.job.name, 'train');
  assert.equal(seriesCapacity(req, 'a100'), undefined);
  assert.deepEqual(read, ['job', 'cluster']);
  // A part changed in place stays changed for the rest of the call.
  req.placement.pools[0].series = 'a100';
  assert.equal(req.placement.pools[0].series, 'a100');
  assert.deepEqual(read, ['job', 'cluster', 'placement']);
  assert.deepEqual(parts(req), parts(given));
});

test('the builder shows what a single-cluster host shows', () => {
  const req = new RequestBuilder()
    .pool('a', 1, 8, 'h100')
    .resources(16_000, 64n << 30n)
    .series('h100', 16, 8, 2)
    .tainted({ key: 'gpu', effect: 'no-schedule' }, 1, 8)
    .usage('h100', 8)
    .build();
  const h100 = {
    series: 'h100',
    total: 16,
    allocatable: 8,
    inUse: 8,
    blocked: 0,
    free: 0,
    largestFreeBlock: 0,
    nodes: 2,
    tainted: 8,
    taints: [{ taint: { key: 'gpu', effect: 'no-schedule' }, nodes: 1 }],
    defaultCpuMillis: DEFAULT_CPU_MILLIS,
    defaultMemoryBytes: DEFAULT_MEMORY_BYTES,
  };
  assert.deepEqual(req.cluster.series, [h100]);
  assert.deepEqual(req.fleets, [{ name: 'default', labels: [], available: true, series: [h100] }]);
  assert.deepEqual(req.usage, [{ series: 'h100', running: 8, queued: 0, borrowed: 0 }]);
  assert.deepEqual(req.shares, []);
  assert.equal(req.job.kind, 'training');
  assert.equal(req.job.pools[0].cpuMillis, 16_000n);
  assert.deepEqual(req.placement.pools, [
    {
      pool: 'a',
      series: 'h100',
      nodeSelector: [],
      rayResources: [],
      labels: [],
      annotations: [],
      tolerations: [],
      affinity: { required: [], preferred: [] },
      fleets: [],
    },
  ]);
  const west = { name: 'west', labels: [['region', 'us-west']] as Array<[string, string]>, available: false, series: [] };
  assert.deepEqual(new RequestBuilder().series('h100', 8, 8, 1).fleet(west).build().fleets, [west]);
});

test('decisions: admit as placed, with a placement, with terms', () => {
  const given = new RequestBuilder().pool('a', 1, 8).build().placement;
  const changed = structuredClone(given);
  changed.pools[0].series = 'h100';
  const none = { placement: undefined, priorityCap: undefined, preemptible: undefined };
  assert.deepEqual(admit(), { tag: 'admit', val: none });
  assert.deepEqual(admit(changed), { tag: 'admit', val: { ...none, placement: changed } });
  assert.deepEqual(admit({ priorityCap: 3, preemptible: false }), {
    tag: 'admit',
    val: { placement: undefined, priorityCap: 3, preemptible: false },
  });
  assert.deepEqual(admit(changed, { priorityCap: 3 }), {
    tag: 'admit',
    val: { placement: changed, priorityCap: 3, preemptible: undefined },
  });
  assert.equal(placed(admit(), given), given);
  assert.equal(placed(admit(changed), given), changed);
  assert.equal(placed(queue('a.b', 'm'), given), undefined);
});

test('a borrowing admit marks every pool', () => {
  const placement = new RequestBuilder().pool('a', 1, 8).pool('b', 1, 8).build().placement;
  const d = borrowing(structuredClone(placement), 8, { priorityCap: 5 });
  assert.equal(d.tag, 'admit');
  if (d.tag !== 'admit') return;
  const marks = d.val.placement?.pools.map((p) => p.annotations);
  assert.deepEqual(marks, [
    [[BORROWED_GPUS_ANNOTATION, '8']],
    [[BORROWED_GPUS_ANNOTATION, '8']],
  ]);
  assert.equal(d.val.priorityCap, 5);
});

test('the component configures once, reads lazily and fails closed without settings', () => {
  const policy = definePolicy({
    settings: z.strictObject({ cap: z.number().int() }),
    validate(s) {
      if (s.cap < 0) throw new SettingsError('cap must not be negative');
    },
    evaluate: (s, req) => (req.job.name === 'big' ? admit({ priorityCap: s.cap }) : admit()),
  });
  const logs: Array<[string, string]> = [];
  const world = exportPolicy(policy, (level, message) => logs.push([level, message]));
  const given = new RequestBuilder().name('big').build();
  const read: string[] = [];

  assert.equal(world.validateSettings('{"cap": 1}'), undefined);
  assert.throws(() => world.validateSettings('{"cap": -1}'), (e: unknown) => e === 'cap must not be negative');
  assert.throws(() => world.evaluate(countingHandle(given, read)), /called before configure/);
  assert.deepEqual(logs, [['error', 'called before configure']]);
  assert.throws(() => world.planPreemption(PLAN), /called before configure/);

  world.configure('{"cap": 5}');
  // A refused document leaves the configured settings as they were.
  assert.throws(() => world.configure('{"cap": "x"}'), (e: unknown) => typeof e === 'string' && e.startsWith('invalid settings: cap: '));
  assert.deepEqual(world.evaluate(countingHandle(given, read)), admit({ priorityCap: 5 }));
  assert.deepEqual(read, ['job']);
  assert.deepEqual(world.planPreemption(PLAN), { tag: 'accept' });
});

test('preemption plans: accepted by default, else reordered or vetoed', () => {
  const passive = definePolicy({ settings: S, evaluate: () => admit() });
  assert.deepEqual(new Harness(passive).planPreemption(PLAN), { tag: 'accept' });
  const picky = definePolicy({
    settings: S,
    evaluate: () => admit(),
    planPreemption(_s, plan) {
      if (plan.candidates.some((c) => c.checkpointAgeSeconds === undefined)) {
        return veto('preempt.no-checkpoint', 'a candidate never checkpointed');
      }
      return reorder(plan.candidates.map((c) => c.jobId).reverse());
    },
  });
  assert.deepEqual(new Harness(picky).planPreemption(PLAN), {
    tag: 'veto',
    val: { code: 'preempt.no-checkpoint', message: 'a candidate never checkpointed' },
  });
  const checkpointed = { ...PLAN, candidates: PLAN.candidates.slice(0, 1) };
  assert.deepEqual(new Harness(picky).planPreemption(checkpointed), { tag: 'reorder', val: ['old'] });
});

test('placement helpers', () => {
  const pool = new RequestBuilder().pool('a', 1, 8).build().placement.pools[0];
  const taint = { key: 'gpu', value: 'h100', effect: 'no-execute' } as const;
  tolerate(pool, tolerationOf(taint));
  tolerate(pool, tolerationOf(taint));
  assert.deepEqual(pool.tolerations, [{ key: 'gpu', operator: 'equal', value: 'h100', effect: 'no-execute' }]);
  assert.deepEqual(tolerationOf({ key: 'gpu', effect: 'no-schedule' }), {
    key: 'gpu',
    operator: 'exists',
    value: undefined,
    effect: 'no-schedule',
  });
  requireLabelIn(pool, 'zone', ['a']);
  requireLabelIn(pool, 'rack', ['1', '2']);
  assert.deepEqual(pool.affinity.required, [
    {
      matchExpressions: [
        { key: 'zone', operator: 'is-in', values: ['a'] },
        { key: 'rack', operator: 'is-in', values: ['1', '2'] },
      ],
    },
  ]);
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
      series: [{
        series: 'h100', total: 16, allocatable: 16, inUse: 8, blocked: 0, free: 8, largestFreeBlock: 8, nodes: 2,
        defaultCpuMillis: 8000, defaultMemoryBytes: 32 * 2 ** 30,
      }],
    },
    usage: [],
  };
  assert.deepEqual(parts(requestFromHost(host)), parts(req));
  assert.deepEqual(decisionToHost(reject('a.b', 'm'), req.placement), { kind: 'reject', code: 'a.b', message: 'm' });
  const unchanged = {
    kind: 'admit',
    placement: { pools: [{ pool: 'a', series: 'h100', nodeSelector: {}, rayResources: {}, labels: {}, annotations: {} }] },
  };
  assert.deepEqual(decisionToHost(admit(), req.placement), unchanged);
  assert.deepEqual(decisionToHost(admit(req.placement, { priorityCap: 2, preemptible: false }), req.placement), {
    ...unchanged,
    priorityCap: 2,
    preemptible: false,
  });

  // The 0.2.0-era fields: Kubernetes spellings, omitted when empty.
  const placement = {
    pools: [{
      pool: 'a', series: null, nodeSelector: { zone: 'a' }, rayResources: { h100: 8 }, labels: {}, annotations: {},
      tolerations: [{ key: 'gpu', operator: 'Exists', effect: 'NoSchedule' }],
      affinity: {
        required: [{ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['b'] }] }],
        preferred: [{ weight: 5, term: { matchExpressions: [{ key: 'fast', operator: 'Exists' }] } }],
      },
      fleets: ['west'],
    }],
  };
  const rich = requestFromHost({
    ...host,
    job: { ...host.job, kind: 'inference', pools: [{ name: 'a', nodes: 1, gpusPerNode: 8, series: null, cpuMillis: 4000 }] },
    cluster: {
      ...host.cluster,
      series: [{ ...host.cluster.series[0], tainted: 8, taints: [{ taint: { key: 'gpu', effect: 'NoExecute' }, nodes: 1 }] }],
    },
    usage: [{ series: 'h100', running: 8, queued: 0 }],
    placement,
  });
  assert.equal(rich.job.kind, 'inference');
  assert.deepEqual(rich.job.pools, [{ name: 'a', nodes: 1, gpusPerNode: 8, series: undefined, cpuMillis: 4000n, memoryBytes: undefined }]);
  assert.deepEqual(rich.cluster.series[0].taints, [{ taint: { key: 'gpu', value: undefined, effect: 'no-execute' }, nodes: 1 }]);
  assert.deepEqual(rich.fleets.map((f) => f.name), ['default']);
  assert.deepEqual(rich.usage, [{ series: 'h100', running: 8, queued: 0, borrowed: 0 }]);
  assert.deepEqual(rich.placement.pools[0].tolerations, [
    { key: 'gpu', operator: 'exists', value: undefined, effect: 'no-schedule' },
  ]);
  assert.deepEqual(rich.placement.pools[0].affinity.required[0].matchExpressions[0].operator, 'not-in');
  assert.deepEqual(decisionToHost(admit(), rich.placement), { kind: 'admit', placement });
});
