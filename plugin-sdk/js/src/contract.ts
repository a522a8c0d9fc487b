/**
 * The contract's types, as jco generates them from the WIT folder named in
 * `plugin-sdk/sdk.toml`. `#contract` resolves (see `tsconfig.plugin.json`) to the file
 * `forge-plugin build` generates next to jco's declarations in `target/sdk/js-types/`:
 * it re-exports the versioned `forge:policy/types@X.Y.Z` module, so this SDK names no
 * contract version. Types only: nothing here exists at run time. The request itself
 * is a host resource, read through the SDK's `Request` (see `requests.ts`).
 */
export type {
  Admission,
  Cluster,
  Decision,
  Fleet,
  Hold,
  Job,
  Level,
  NodeAffinity,
  NodeSelectorRequirement,
  NodeSelectorTerm,
  Placement,
  PlanVerdict,
  Pool,
  PoolPlacement,
  PreemptionPlan,
  PreferredTerm,
  Rejection,
  SelectorOperator,
  SeriesCapacity,
  SeriesTaint,
  SeriesUsage,
  StorageMode,
  StringMap,
  Taint,
  TaintEffect,
  TeamShare,
  Toleration,
  TolerationOperator,
  Victim,
  WorkloadKind,
} from '#contract';
