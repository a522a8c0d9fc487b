/**
 * Requests and decisions in the host's JSON (the form the gateway's API and the shared
 * test tables use) to and from the contract's types, and what the host shows a policy
 * that the JSON leaves out: the initial placement, one fleet named `default` with the
 * cluster's capacity, no team shares and no borrowed GPUs.
 *
 * The host's JSON writes string maps as objects, enum values of the 0.2.0-era fields
 * in their Kubernetes spelling (`NoSchedule`, `In`), 64-bit numbers as numbers, and
 * leaves out empty lists and unset options of those fields; the contract has lists of
 * pairs, kebab-case enums and `bigint`.
 */
import type {
  Cluster,
  Decision,
  Fleet,
  Job,
  NodeAffinity,
  NodeSelectorTerm,
  Placement,
  PoolPlacement,
  SelectorOperator,
  SeriesCapacity,
  Taint,
  TaintEffect,
  Toleration,
  TolerationOperator,
} from './contract.js';
import { Request } from './requests.js';

/** A JSON object of the host (untyped input, read field by field below). */
type Obj = Record<string, any>;

/** An enum's contract values and their spelling in the host's JSON. */
function spelling<T extends string>(pairs: Array<[T, string]>) {
  const toHost = new Map<T, string>(pairs);
  const fromHost = new Map<string, T>(pairs.map(([wit, host]) => [host, wit]));
  return {
    fromHost(value: string): T {
      const wit = fromHost.get(value);
      if (wit === undefined) throw new Error(`unknown value ${JSON.stringify(value)} in host JSON`);
      return wit;
    },
    toHost: (value: T): string => toHost.get(value) as string,
  };
}

const EFFECT = spelling<TaintEffect>([
  ['no-schedule', 'NoSchedule'],
  ['prefer-no-schedule', 'PreferNoSchedule'],
  ['no-execute', 'NoExecute'],
]);
const TOLERATION_OP = spelling<TolerationOperator>([
  ['equal', 'Equal'],
  ['exists', 'Exists'],
]);
const SELECTOR_OP = spelling<SelectorOperator>([
  ['is-in', 'In'],
  ['not-in', 'NotIn'],
  ['exists', 'Exists'],
  ['does-not-exist', 'DoesNotExist'],
  ['gt', 'Gt'],
  ['lt', 'Lt'],
]);

/** `null` and absent → `undefined`. */
const opt = <T>(value: T | null | undefined): T | undefined => value ?? undefined;
const optBig = (value: number | null | undefined): bigint | undefined =>
  value === null || value === undefined ? undefined : BigInt(value);
const pairs = <V>(map: Record<string, V> | undefined): Array<[string, V]> => Object.entries(map ?? {});

function taintFromHost(t: Obj): Taint {
  return { key: t.key, value: opt(t.value), effect: EFFECT.fromHost(t.effect) };
}

function capacityFromHost(c: Obj): SeriesCapacity {
  return {
    series: c.series,
    total: c.total,
    allocatable: c.allocatable,
    inUse: c.inUse,
    blocked: c.blocked,
    free: c.free,
    largestFreeBlock: c.largestFreeBlock,
    nodes: c.nodes,
    tainted: c.tainted ?? 0,
    taints: (c.taints ?? []).map((t: Obj) => ({ taint: taintFromHost(t.taint), nodes: t.nodes })),
    defaultCpuMillis: BigInt(c.defaultCpuMillis ?? 0),
    defaultMemoryBytes: BigInt(c.defaultMemoryBytes ?? 0),
  };
}

function jobFromHost(j: Obj): Job {
  return {
    id: j.id,
    team: j.team,
    name: j.name,
    framework: j.framework,
    kind: j.kind ?? 'training',
    priority: j.priority,
    pools: j.pools.map((p: Obj) => ({
      name: p.name,
      nodes: p.nodes,
      gpusPerNode: p.gpusPerNode,
      series: opt(p.series),
      cpuMillis: optBig(p.cpuMillis),
      memoryBytes: optBig(p.memoryBytes),
    })),
    storage: j.storage,
    labels: pairs(j.labels),
  };
}

function tolerationFromHost(t: Obj): Toleration {
  return {
    key: opt(t.key),
    operator: TOLERATION_OP.fromHost(t.operator),
    value: opt(t.value),
    effect: t.effect == null ? undefined : EFFECT.fromHost(t.effect),
  };
}

function termFromHost(t: Obj): NodeSelectorTerm {
  return {
    matchExpressions: (t.matchExpressions ?? []).map((r: Obj) => ({
      key: r.key,
      operator: SELECTOR_OP.fromHost(r.operator),
      values: r.values ?? [],
    })),
  };
}

function placementFromHost(p: Obj): Placement {
  return {
    pools: p.pools.map(
      (pp: Obj): PoolPlacement => ({
        pool: pp.pool,
        series: opt(pp.series),
        nodeSelector: pairs(pp.nodeSelector),
        rayResources: pairs(pp.rayResources),
        labels: pairs(pp.labels),
        annotations: pairs(pp.annotations),
        tolerations: (pp.tolerations ?? []).map(tolerationFromHost),
        affinity: {
          required: (pp.affinity?.required ?? []).map(termFromHost),
          preferred: (pp.affinity?.preferred ?? []).map((w: Obj) => ({
            weight: w.weight,
            term: termFromHost(w.term),
          })),
        },
        fleets: pp.fleets ?? [],
      }),
    ),
  };
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
      tolerations: [],
      affinity: { required: [], preferred: [] },
      fleets: [],
    })),
  };
}

/** The fleets a single-cluster host shows: one, `default`, with the cluster's capacity. */
export function singleFleet(cluster: Cluster): Fleet[] {
  return [{ name: 'default', labels: [], available: true, series: [...cluster.series] }];
}

/**
 * A request in the host's JSON (`job`, `cluster`, `usage`; `placement` optional, else
 * the initial one) → a `Request`, with the fleets, shares and borrowed GPUs the host
 * shows for it.
 */
export function requestFromHost(obj: Obj): Request {
  const job = jobFromHost(obj.job);
  const cluster: Cluster = {
    gpuNodeLabel: obj.cluster?.gpuNodeLabel ?? '',
    series: (obj.cluster?.series ?? []).map(capacityFromHost),
  };
  return Request.fromParts({
    job,
    cluster,
    fleets: singleFleet(cluster),
    usage: (obj.usage ?? []).map((u: Obj) => ({
      series: u.series,
      running: u.running,
      queued: u.queued,
      borrowed: 0,
    })),
    shares: [],
    placement: obj.placement ? placementFromHost(obj.placement) : initialPlacement(job),
  });
}

function tolerationToHost(t: Toleration): Obj {
  return {
    ...(t.key === undefined ? {} : { key: t.key }),
    operator: TOLERATION_OP.toHost(t.operator),
    ...(t.value === undefined ? {} : { value: t.value }),
    ...(t.effect === undefined ? {} : { effect: EFFECT.toHost(t.effect) }),
  };
}

function termToHost(t: NodeSelectorTerm): Obj {
  return {
    matchExpressions: t.matchExpressions.map((r) => ({
      key: r.key,
      operator: SELECTOR_OP.toHost(r.operator),
      ...(r.values.length ? { values: r.values } : {}),
    })),
  };
}

function affinityToHost(a: NodeAffinity): Obj {
  return {
    ...(a.required.length ? { required: a.required.map(termToHost) } : {}),
    ...(a.preferred.length
      ? { preferred: a.preferred.map((w) => ({ weight: w.weight, term: termToHost(w.term) })) }
      : {}),
  };
}

function placementToHost(p: Placement): Obj {
  return {
    pools: p.pools.map((pp) => ({
      pool: pp.pool,
      series: pp.series ?? null,
      nodeSelector: Object.fromEntries(pp.nodeSelector),
      rayResources: Object.fromEntries(pp.rayResources),
      labels: Object.fromEntries(pp.labels),
      annotations: Object.fromEntries(pp.annotations),
      ...(pp.tolerations.length ? { tolerations: pp.tolerations.map(tolerationToHost) } : {}),
      ...(pp.affinity.required.length || pp.affinity.preferred.length
        ? { affinity: affinityToHost(pp.affinity) }
        : {}),
      ...(pp.fleets.length ? { fleets: pp.fleets } : {}),
    })),
  };
}

/**
 * A decision → the host's JSON (`{"kind": "admit", "placement": …}`, …). An admit
 * without a placement hands on `given`, the placement the policy was shown, as the
 * host does.
 */
export function decisionToHost(decision: Decision, given: Placement): Obj {
  switch (decision.tag) {
    case 'admit': {
      const { placement, priorityCap, preemptible } = decision.val;
      return {
        kind: 'admit',
        placement: placementToHost(placement ?? given),
        ...(priorityCap === undefined ? {} : { priorityCap }),
        ...(preemptible === undefined ? {} : { preemptible }),
      };
    }
    case 'queue':
      return { kind: 'queue', code: decision.val.code, message: decision.val.message };
    case 'reject': {
      const { code, message, field } = decision.val;
      return field === undefined ? { kind: 'reject', code, message } : { kind: 'reject', code, message, field };
    }
  }
}
