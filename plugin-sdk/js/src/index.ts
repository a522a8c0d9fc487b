/**
 * Forge policy SDK for TypeScript.
 *
 * Write an admission policy as the default export of a module, made with
 * {@link definePolicy} (a zod settings schema, an optional check, a decision function,
 * an optional answer to planned preemptions); `forge-plugin build` bundles it into a
 * WebAssembly component targeting the same WIT contract as the Rust and Python SDKs,
 * and `forge-plugin test` runs its `*.test.ts` files natively with `node:test` and
 * `forge-policy/harness`. The {@link Request} a policy gets reads each part from the
 * host on first access: a policy pays only for what it looks at.
 */
export type * from './contract.js';
export {
  type AdmitOptions,
  BORROWED_GPUS_ANNOTATION,
  accept,
  admit,
  borrowing,
  decisionKind,
  placed,
  queue,
  reject,
  reorder,
  veto,
} from './decisions.js';
export { definePolicy, type Policy, type PolicyDefinition } from './policy.js';
export {
  Request,
  type RequestHandle,
  type RequestParts,
  gpusBySeries,
  jobLabel,
  poolGpus,
  poolSeries,
  requireLabelIn,
  runningGpus,
  seriesCapacity,
  setLabel,
  setNodeSelector,
  setRayResource,
  tolerate,
  tolerationOf,
  totalGpus,
  totalNodes,
} from './requests.js';
export { SettingsError, parseSettings } from './settings.js';
export * as log from './log.js';
export { z } from 'zod';
