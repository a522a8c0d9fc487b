/**
 * The contract's types, as jco generates them from the WIT folder named in
 * `plugin-sdk/sdk.toml`. `#contract` resolves (see `tsconfig.plugin.json`) to the file
 * `forge-plugin build` generates next to jco's declarations in `target/sdk/js-types/`:
 * it re-exports the versioned `forge:policy/types@X.Y.Z` module, so this SDK names no
 * contract version. Types only: nothing here exists at run time.
 */
export type {
  Cluster,
  Decision,
  Hold,
  Job,
  Level,
  Placement,
  Pool,
  PoolPlacement,
  Rejection,
  Request,
  SeriesCapacity,
  SeriesUsage,
  StorageMode,
} from '#contract';
