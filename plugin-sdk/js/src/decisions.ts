/**
 * Building a policy's answers. To a job: admit (with the placement it was given, or a
 * changed one, optionally capping its priority or making it non-preemptible), queue
 * with a hold, reject with a stable code, a message saying what to change and the
 * field it is about. To a planned preemption: accept, reorder or veto.
 */
import type { Decision, Placement, PlanVerdict } from './contract.js';

/** Terms of an admission beyond its placement. */
export interface AdmitOptions {
  /**
   * The highest priority the job may run at: it runs at `min(job.priority, cap)`, the
   * lowest cap of the chain applying.
   */
  priorityCap?: number;
  /**
   * `false`: the job may not be preempted (global policies only: a team's policy that
   * says so fails the admission closed). Unset: the host's default.
   */
  preemptible?: boolean;
}

/**
 * The job may run. Without a placement it runs as placed so far (nothing is copied
 * back to the host); pass `request.placement`, changed, to hand on a changed one:
 * `admit()`, `admit(placement)`, `admit({ priorityCap: 5 })`,
 * `admit(placement, { preemptible: false })`.
 */
export function admit(placement?: Placement, options?: AdmitOptions): Decision;
export function admit(options: AdmitOptions): Decision;
export function admit(first?: Placement | AdmitOptions, options: AdmitOptions = {}): Decision {
  const placement = first !== undefined && 'pools' in first ? first : undefined;
  const terms = first !== undefined && !('pools' in first) ? first : options;
  return {
    tag: 'admit',
    val: { placement, priorityCap: terms.priorityCap, preemptible: terms.preemptible },
  };
}

/**
 * The pod annotation that marks an admission as borrowing: GPUs beyond the team's
 * guaranteed quota (contract 0.3.0 has no field for it).
 */
export const BORROWED_GPUS_ANNOTATION = 'forge.dev/borrowed-gpus';

/**
 * `admit`, marked as running `gpus` GPUs beyond the team's guaranteed quota (on idle
 * GPUs): the host may reclaim them — preempting this job, least lost work first — for
 * a team whose guarantee covers its job. Every pool of `placement` (start from
 * `request.placement`) carries the mark as the pods' `BORROWED_GPUS_ANNOTATION`.
 */
export function borrowing(placement: Placement, gpus: number, options: AdmitOptions = {}): Decision {
  for (const pool of placement.pools) {
    pool.annotations = pool.annotations.filter(([k]) => k !== BORROWED_GPUS_ANNOTATION);
    pool.annotations.push([BORROWED_GPUS_ANNOTATION, String(gpus)]);
  }
  return admit(placement, options);
}

/** The job waits and is re-evaluated when capacity, usage or shares change. */
export function queue(code: string, message: string): Decision {
  return { tag: 'queue', val: { code, message } };
}

/** The job is refused; `field` is the JSON path it is about, e.g. `pools[1].series`. */
export function reject(code: string, message: string, field?: string): Decision {
  return { tag: 'reject', val: { code, message, field } };
}

/** `admit`, `queue` or `reject`. */
export function decisionKind(decision: Decision): Decision['tag'] {
  return decision.tag;
}

/**
 * The placement an admit hands on, given the placement the policy was shown;
 * `undefined` for queue and reject.
 */
export function placed(decision: Decision, given: Placement): Placement | undefined {
  return decision.tag === 'admit' ? (decision.val.placement ?? given) : undefined;
}

/** Preempt the candidates in the host's order. */
export function accept(): PlanVerdict {
  return { tag: 'accept' };
}

/**
 * Preempt in this order: the candidates' job ids, each once (global policies only: a
 * team's policy may only accept or veto).
 */
export function reorder(jobIds: string[]): PlanVerdict {
  return { tag: 'reorder', val: jobIds };
}

/** No preemption for this job now; it keeps waiting with this reason. */
export function veto(code: string, message: string): PlanVerdict {
  return { tag: 'veto', val: { code, message } };
}
