/**
 * Building a policy's answer: admit with a placement, queue with a hold, reject with a
 * stable code, a message saying what to change and the field it is about.
 */
import type { Decision, Placement } from './contract.js';

/** The job may run with this placement (usually `request.placement`, possibly extended). */
export function admit(placement: Placement): Decision {
  return { tag: 'admit', val: placement };
}

/** The job waits and is re-evaluated when capacity or usage changes. */
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
