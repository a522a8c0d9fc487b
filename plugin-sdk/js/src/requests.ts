/**
 * Reading a request and extending a placement, so policies read like the rules they
 * implement (the same helpers as the Rust and Python SDKs).
 */
import type { Job, Pool, PoolPlacement, Request, SeriesCapacity } from './contract.js';

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

/** Capacity of one series, if any node carries it. */
export function seriesCapacity(request: Request, series: string): SeriesCapacity | undefined {
  return request.cluster.series.find((s) => s.series === series);
}

/** GPUs the team has running on a series. */
export function runningGpus(request: Request, series: string): number {
  return request.usage.filter((u) => u.series === series).reduce((n, u) => n + u.running, 0);
}

/** The series of pool `index` as placed so far, else as requested. */
export function poolSeries(request: Request, index: number): string | undefined {
  return request.placement.pools[index].series ?? request.job.pools[index].series;
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
