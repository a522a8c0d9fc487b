/**
 * Native test harness for `node:test`: run a policy with the same settings parsing and
 * the same initial placement as in the host, build requests, capture logs, and convert
 * requests and decisions from and to the host's JSON (the form the gateway's API and
 * the shared test tables use).
 *
 * ```ts
 * const h = new Harness(policy, '{"max_nodes": 1}');
 * const d = h.evaluate(new RequestBuilder().pool('train', 2, 8, 'h100').build());
 * assert.equal(d.tag, 'reject');
 * ```
 */
import type { Decision, Job, Level, Placement, Request, StorageMode } from './contract.js';
import * as log from './log.js';
import type { Policy } from './policy.js';
import { SettingsError } from './settings.js';

/** A policy with parsed and validated settings, run natively. */
export class Harness<T> {
  readonly settings: T;
  /** Log lines of the evaluations so far, as `[level, message]`. */
  readonly logs: Array<[Level, string]> = [];

  constructor(
    private readonly policy: Policy<T>,
    settings = '{}',
  ) {
    this.settings = policy.check(settings);
  }

  /** Evaluate one request. */
  evaluate(request: Request): Decision {
    log.setLogSink((level, message) => this.logs.push([level, message]));
    try {
      return this.policy.evaluate(this.settings, request);
    } finally {
      log.setLogSink(() => {});
    }
  }
}

/** What `validate-settings` answers: `undefined` if accepted, else the message. */
export function validate<T>(policy: Policy<T>, settings: string): string | undefined {
  try {
    policy.check(settings);
    return undefined;
  } catch (e) {
    if (e instanceof SettingsError) return e.message;
    throw e;
  }
}

/**
 * What the component's `evaluate` does with settings that were never validated: throws
 * `SettingsError` where the component traps.
 */
export function evaluateUnchecked<T>(policy: Policy<T>, settings: string, request: Request): Decision {
  return policy.evaluate(policy.parse(settings), request);
}

/** The placement the host gives the first plugin of a chain. */
export function initialPlacement(job: Job): Placement {
  return {
    pools: job.pools.map((p) => ({
      pool: p.name,
      series: p.series,
      nodeSelector: [],
      rayResources: [],
      labels: [],
      annotations: [],
    })),
  };
}

/**
 * Builds a request with the harness defaults of every SDK: job `job-1` named `train` of
 * team `team-a`, framework `nemo-rl`, shared storage, node label `starforge/gpu-series`,
 * and the initial placement the host gives the first plugin.
 */
export class RequestBuilder {
  private readonly job: Job = {
    id: 'job-1',
    team: 'team-a',
    name: 'train',
    framework: 'nemo-rl',
    priority: 0,
    pools: [],
    storage: 'shared',
    labels: [],
  };
  private readonly request: Omit<Request, 'job' | 'placement'> = {
    cluster: { gpuNodeLabel: 'starforge/gpu-series', series: [] },
    usage: [],
  };

  team(team: string): this {
    this.job.team = team;
    return this;
  }

  name(name: string): this {
    this.job.name = name;
    return this;
  }

  label(key: string, value: string): this {
    this.job.labels.push([key, value]);
    return this;
  }

  storage(storage: StorageMode): this {
    this.job.storage = storage;
    return this;
  }

  pool(name: string, nodes: number, gpus: number, series?: string): this {
    this.job.pools.push({ name, nodes, gpusPerNode: gpus, series });
    return this;
  }

  /** A series with `total` GPUs on `nodes` nodes, `free` of them free. */
  series(name: string, total: number, free: number, nodes: number): this {
    this.request.cluster.series.push({
      series: name,
      total,
      allocatable: total,
      inUse: total - Math.min(free, total),
      blocked: 0,
      free,
      largestFreeBlock: nodes ? Math.min(free, Math.floor(total / nodes)) : 0,
      nodes,
    });
    return this;
  }

  usage(series: string, running: number, queued = 0): this {
    this.request.usage.push({ series, running, queued });
    return this;
  }

  build(): Request {
    return { ...this.request, job: this.job, placement: initialPlacement(this.job) };
  }
}

/** Fields whose host form is a JSON object and whose contract form is a list of pairs. */
const MAP_FIELDS = new Set(['labels', 'nodeSelector', 'rayResources', 'annotations']);

function fromHost(value: unknown, key?: string): unknown {
  if (value === null) return undefined;
  if (Array.isArray(value)) return value.map((v) => fromHost(v));
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (key !== undefined && MAP_FIELDS.has(key)) return entries.map(([k, v]) => [k, fromHost(v)]);
    return Object.fromEntries(entries.map(([k, v]) => [k, fromHost(v, k)]));
  }
  return value;
}

function toHost(value: unknown, key?: string): unknown {
  if (value === undefined) return null;
  if (Array.isArray(value)) {
    if (key !== undefined && MAP_FIELDS.has(key)) {
      return Object.fromEntries((value as Array<[string, unknown]>).map(([k, v]) => [k, toHost(v)]));
    }
    return value.map((v) => toHost(v));
  }
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toHost(v, k)]));
  }
  return value;
}

/**
 * A request in the host's JSON (`job`, `cluster`, `usage`; `placement` optional, else the
 * initial one) → the contract's `Request`.
 */
export function requestFromHost(obj: Record<string, unknown>): Request {
  const job = fromHost(obj.job, 'job') as Job;
  return {
    job,
    cluster: (fromHost(obj.cluster ?? { gpuNodeLabel: '', series: [] }, 'cluster') ?? {
      gpuNodeLabel: '',
      series: [],
    }) as Request['cluster'],
    usage: (fromHost(obj.usage ?? []) ?? []) as Request['usage'],
    placement: obj.placement ? (fromHost(obj.placement, 'placement') as Placement) : initialPlacement(job),
  };
}

/** A decision → the host's JSON (`{"kind": "admit", "placement": …}`, …). */
export function decisionToHost(decision: Decision): Record<string, unknown> {
  switch (decision.tag) {
    case 'admit':
      return { kind: 'admit', placement: toHost(decision.val, 'placement') };
    case 'queue':
      return { kind: 'queue', code: decision.val.code, message: decision.val.message };
    case 'reject': {
      const { code, message, field } = decision.val;
      return field === undefined ? { kind: 'reject', code, message } : { kind: 'reject', code, message, field };
    }
  }
}
