/**
 * Native test harness for `node:test`: run a policy with the same settings parsing and
 * checks as the component's `configure`, build requests the way the host shows them
 * (the initial placement, one fleet named `default`), capture logs, and convert
 * requests and decisions from and to the host's JSON (the form the gateway's API and
 * the shared test tables use).
 *
 * ```ts
 * const h = new Harness(policy, '{"max_nodes": 1}');
 * const d = h.evaluate(new RequestBuilder().pool('train', 2, 8, 'h100').build());
 * assert.equal(d.tag, 'reject');
 * ```
 */
import type {
  Cluster,
  Decision,
  Fleet,
  Job,
  Level,
  Placement,
  PlanVerdict,
  PreemptionPlan,
  SeriesCapacity,
  SeriesUsage,
  StorageMode,
  Taint,
  TeamShare,
  WorkloadKind,
} from './contract.js';
import { initialPlacement, singleFleet } from './host-json.js';
import * as log from './log.js';
import type { Policy } from './policy.js';
import { Request } from './requests.js';
import { SettingsError } from './settings.js';

export { decisionToHost, initialPlacement, requestFromHost } from './host-json.js';

/** CPU (millicores) {@link RequestBuilder.series} gives a series' machines by default. */
export const DEFAULT_CPU_MILLIS = 8_000n;
/** Memory (bytes) {@link RequestBuilder.series} gives a series' machines by default. */
export const DEFAULT_MEMORY_BYTES = 32n << 30n;

/** A policy with parsed and validated settings (as `configure` keeps them), run natively. */
export class Harness<T> {
  readonly settings: T;
  /** Log lines of the calls so far, as `[level, message]`. */
  readonly logs: Array<[Level, string]> = [];

  constructor(
    private readonly policy: Policy<T>,
    settings = '{}',
  ) {
    this.settings = policy.check(settings);
  }

  /** Evaluate one request. */
  evaluate(request: Request): Decision {
    return this.capture(() => this.policy.evaluate(this.settings, request));
  }

  /** Answer a preemption plan. */
  planPreemption(plan: PreemptionPlan): PlanVerdict {
    return this.capture(() => this.policy.planPreemption(this.settings, plan));
  }

  private capture<R>(call: () => R): R {
    log.setLogSink((level, message) => this.logs.push([level, message]));
    try {
      return call();
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
 * Evaluate with settings that never passed `validate-settings`: throws `SettingsError`
 * where the component's `configure` refuses them and the admission fails closed.
 */
export function evaluateUnchecked<T>(policy: Policy<T>, settings: string, request: Request): Decision {
  return policy.evaluate(policy.check(settings), request);
}

/**
 * Builds a request with the harness defaults of every SDK: job `job-1` named `train` of
 * team `team-a`, a training job of framework `nemo-rl` at priority 0, shared storage,
 * node label `starforge/gpu-series`, one fleet named `default` with the cluster's
 * series, no team shares, and the initial placement the host gives the first plugin.
 */
export class RequestBuilder {
  private readonly job: Job = {
    id: 'job-1',
    team: 'team-a',
    name: 'train',
    framework: 'nemo-rl',
    kind: 'training',
    priority: 0,
    pools: [],
    storage: 'shared',
    labels: [],
  };
  private readonly cluster: Cluster = { gpuNodeLabel: 'starforge/gpu-series', series: [] };
  private readonly fleetList: Fleet[] = [];
  private readonly usageList: SeriesUsage[] = [];
  private readonly shareList: TeamShare[] = [];
  private given: Placement | undefined;

  team(team: string): this {
    this.job.team = team;
    return this;
  }

  jobId(id: string): this {
    this.job.id = id;
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

  kind(kind: WorkloadKind): this {
    this.job.kind = kind;
    return this;
  }

  priority(priority: number): this {
    this.job.priority = priority;
    return this;
  }

  /** Add a pool: `nodes` machines with `gpus` GPUs each, optionally asking for a series. */
  pool(name: string, nodes: number, gpus: number, series?: string): this {
    this.job.pools.push({ name, nodes, gpusPerNode: gpus, series, cpuMillis: undefined, memoryBytes: undefined });
    return this;
  }

  /** CPU (millicores) and memory (bytes) per machine of the last added pool. */
  resources(cpuMillis: number | bigint, memoryBytes: number | bigint): this {
    const pool = this.job.pools.at(-1);
    if (pool) {
      pool.cpuMillis = BigInt(cpuMillis);
      pool.memoryBytes = BigInt(memoryBytes);
    }
    return this;
  }

  gpuNodeLabel(key: string): this {
    this.cluster.gpuNodeLabel = key;
    return this;
  }

  /** A series with `total` GPUs on `nodes` nodes, `free` of them free. */
  series(name: string, total: number, free: number, nodes: number): this {
    return this.capacity({
      series: name,
      total,
      allocatable: total,
      inUse: total - Math.min(free, total),
      blocked: 0,
      free,
      largestFreeBlock: nodes ? Math.min(free, Math.floor(total / nodes)) : 0,
      nodes,
      tainted: 0,
      taints: [],
      defaultCpuMillis: DEFAULT_CPU_MILLIS,
      defaultMemoryBytes: DEFAULT_MEMORY_BYTES,
    });
  }

  /**
   * Mark `gpus` GPUs on `nodes` nodes of the last added series as tainted with `taint`
   * (not tolerated by Forge's pods: moved out of allocatable and free).
   */
  tainted(taint: Taint, nodes: number, gpus: number): this {
    const s = this.cluster.series.at(-1);
    if (s) {
      s.tainted += gpus;
      s.allocatable = Math.max(0, s.allocatable - gpus);
      s.free = Math.max(0, s.free - gpus);
      s.largestFreeBlock = Math.min(s.largestFreeBlock, s.free);
      s.taints.push({ taint, nodes });
    }
    return this;
  }

  /** Add a series with every field given. */
  capacity(capacity: SeriesCapacity): this {
    this.cluster.series.push(capacity);
    return this;
  }

  /**
   * Add a fleet; once one is added, the fleets are those added instead of one
   * `default` fleet with the cluster's series.
   */
  fleet(fleet: Fleet): this {
    this.fleetList.push(fleet);
    return this;
  }

  /** The team's usage of a series (`borrowed`: of `running`, GPUs beyond its quota). */
  usage(series: string, running: number, queued = 0, borrowed = 0): this {
    this.usageList.push({ series, running, queued, borrowed });
    return this;
  }

  /** A team's fair-share standing on a series. */
  share(share: TeamShare): this {
    this.shareList.push(share);
    return this;
  }

  /** Override the placement so far (as if earlier plugins had run). */
  placement(placement: Placement): this {
    this.given = placement;
    return this;
  }

  build(): Request {
    return Request.fromParts({
      job: this.job,
      cluster: this.cluster,
      fleets: this.fleetList.length ? this.fleetList : singleFleet(this.cluster),
      usage: this.usageList,
      shares: this.shareList,
      placement: this.given ?? initialPlacement(this.job),
    });
  }
}
