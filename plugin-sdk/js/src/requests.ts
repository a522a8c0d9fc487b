/**
 * The request a policy decides about, read lazily, and helpers to read it and extend a
 * placement so policies read like the rules they implement (the same helpers as the
 * Rust and Python SDKs).
 *
 * The host hands the component's `evaluate` a borrowed handle to the request (the
 * contract's `request-view.request` resource) and the plugin reads it part by part,
 * each part copied into the plugin when read. A {@link Request} reads a part on first
 * access and keeps it for the rest of the call, so a policy pays only for what it
 * looks at: one that reads only the job never receives the cluster snapshot. The
 * native harness builds a `Request` with every part given.
 */
import type {
  Cluster,
  Fleet,
  Job,
  Placement,
  Pool,
  PoolPlacement,
  SeriesCapacity,
  SeriesUsage,
  Taint,
  TeamShare,
  Toleration,
} from './contract.js';

/** Every part of a request. */
export interface RequestParts {
  job: Job;
  cluster: Cluster;
  fleets: Fleet[];
  usage: SeriesUsage[];
  shares: TeamShare[];
  placement: Placement;
}

/** The host's request resource as jco binds it: one method per part, each a copy. */
export type RequestHandle = { readonly [K in keyof RequestParts]: () => RequestParts[K] };

/**
 * One admission's inputs: the job, the cluster, the fleets, the team's usage, the
 * teams' shares and the placement so far. Valid for one `evaluate` call. Each part is
 * read once and kept: changing `request.placement` changes what later reads return,
 * and it reaches the host only through `admit(request.placement)`.
 */
export class Request {
  private readonly read: Partial<RequestParts> = {};

  private constructor(private readonly handle: RequestHandle) {}

  /** A request read from the host through `handle` (what the component's `evaluate` gets). */
  static fromHost(handle: RequestHandle): Request {
    return new Request(handle);
  }

  /** A request with every part given (native tests). */
  static fromParts(parts: RequestParts): Request {
    return new Request({
      job: () => parts.job,
      cluster: () => parts.cluster,
      fleets: () => parts.fleets,
      usage: () => parts.usage,
      shares: () => parts.shares,
      placement: () => parts.placement,
    });
  }

  private part<K extends keyof RequestParts>(key: K): RequestParts[K] {
    let value = this.read[key];
    if (value === undefined) {
      value = this.handle[key]();
      this.read[key] = value;
    }
    return value as RequestParts[K];
  }

  /** The job being placed. */
  get job(): Job {
    return this.part('job');
  }

  /** The cluster snapshot, every fleet summed. */
  get cluster(): Cluster {
    return this.part('cluster');
  }

  /** The fleets behind the gateway with their own capacity (one, `default`, on a single cluster). */
  get fleets(): Fleet[] {
    return this.part('fleets');
  }

  /** The team's usage, one entry per series it uses. */
  get usage(): SeriesUsage[] {
    return this.part('usage');
  }

  /** Fair-share standing per team and series (a team's own policies see only their team's). */
  get shares(): TeamShare[] {
    return this.part('shares');
  }

  /** The placement so far in the chain. */
  get placement(): Placement {
    return this.part('placement');
  }
}

/** GPUs of one pool: machines times GPUs per machine. */
export function poolGpus(pool: Pool): number {
  return pool.nodes * pool.gpusPerNode;
}

/** Machines over all pools. */
export function totalNodes(job: Job): number {
  return job.pools.reduce((n, p) => n + p.nodes, 0);
}

/** GPUs over all pools. */
export function totalGpus(job: Job): number {
  return job.pools.reduce((n, p) => n + poolGpus(p), 0);
}

/** Value of a job label, if set. */
export function jobLabel(job: Job, key: string): string | undefined {
  return job.labels.find(([k]) => k === key)?.[1];
}

/** Capacity of one series, if any node carries it (reads the cluster). */
export function seriesCapacity(request: Request, series: string): SeriesCapacity | undefined {
  return request.cluster.series.find((s) => s.series === series);
}

/** GPUs the team has running on a series (reads the usage). */
export function runningGpus(request: Request, series: string): number {
  return request.usage.filter((u) => u.series === series).reduce((n, u) => n + u.running, 0);
}

/** The series of pool `index` as placed so far, else as requested. */
export function poolSeries(request: Request, index: number): string | undefined {
  return request.placement.pools[index]?.series ?? request.job.pools[index].series;
}

/**
 * GPUs this job needs per series, as placed so far (pools without a series count under
 * `undefined`), in the order the series first appear.
 */
export function gpusBySeries(request: Request): Array<[string | undefined, number]> {
  const out: Array<[string | undefined, number]> = [];
  request.job.pools.forEach((pool, i) => {
    const series = poolSeries(request, i);
    const entry = out.find(([s]) => s === series);
    if (entry) {
      entry[1] += poolGpus(pool);
    } else {
      out.push([series, poolGpus(pool)]);
    }
  });
  return out;
}

function upsert<V>(pairs: Array<[string, V]>, key: string, value: V): void {
  const entry = pairs.find(([k]) => k === key);
  if (entry) {
    entry[1] = value;
  } else {
    pairs.push([key, value]);
  }
}

/** Set (or replace) a node-selector entry of a pool. */
export function setNodeSelector(placement: PoolPlacement, key: string, value: string): void {
  upsert(placement.nodeSelector, key, value);
}

/** Set (or replace) a label of a pool's pods. */
export function setLabel(placement: PoolPlacement, key: string, value: string): void {
  upsert(placement.labels, key, value);
}

/** Set (or replace) a Ray custom resource of a pool. */
export function setRayResource(placement: PoolPlacement, name: string, amount: number): void {
  upsert(placement.rayResources, name, amount);
}

/**
 * Add a toleration to a pool's pods (once). Only global policies may add tolerations;
 * a team's policy that does fails the admission closed.
 */
export function tolerate(placement: PoolPlacement, toleration: Toleration): void {
  const same = (t: Toleration) =>
    t.key === toleration.key &&
    t.operator === toleration.operator &&
    t.value === toleration.value &&
    t.effect === toleration.effect;
  if (!placement.tolerations.some(same)) placement.tolerations.push(toleration);
}

/** The toleration of exactly `taint` (key, value and effect). */
export function tolerationOf(taint: Taint): Toleration {
  return {
    key: taint.key,
    operator: taint.value === undefined ? 'exists' : 'equal',
    value: taint.value,
    effect: taint.effect,
  };
}

/**
 * Require a pool's pods to run on nodes whose label `key` is one of `values` (added to
 * each required term, or as the only term). Narrowing: a team's policy may do this.
 */
export function requireLabelIn(placement: PoolPlacement, key: string, values: string[]): void {
  const requirement = () => ({ key, operator: 'is-in' as const, values: [...values] });
  const required = placement.affinity.required;
  if (required.length === 0) {
    required.push({ matchExpressions: [requirement()] });
  } else {
    for (const term of required) term.matchExpressions.push(requirement());
  }
}
