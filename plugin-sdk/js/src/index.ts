/**
 * Forge policy SDK for TypeScript.
 *
 * Write an admission policy as the default export of a module, made with
 * {@link definePolicy} (a zod settings schema, an optional check, a decision function);
 * `forge-plugin build` bundles it into a WebAssembly component targeting the same WIT
 * contract as the Rust and Python SDKs, and `forge-plugin test` runs its `*.test.ts`
 * files natively with `node:test` and `forge-policy/harness`.
 */
export type * from './contract.js';
export { admit, decisionKind, queue, reject } from './decisions.js';
export { definePolicy, type Policy, type PolicyDefinition } from './policy.js';
export {
  gpusBySeries,
  jobLabel,
  poolGpus,
  poolSeries,
  runningGpus,
  seriesCapacity,
  setLabel,
  setNodeSelector,
  setRayResource,
  totalGpus,
  totalNodes,
} from './requests.js';
export { SettingsError, parseSettings } from './settings.js';
export * as log from './log.js';
export { z } from 'zod';
