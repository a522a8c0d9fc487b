/**
 * `definePolicy`: a zod schema for the settings, an optional semantic check, a pure
 * decision function and, optionally, an answer to planned preemptions (accepted by
 * default).
 */
import type { z } from 'zod';

import type { Decision, PlanVerdict, PreemptionPlan } from './contract.js';
import { accept } from './decisions.js';
import type { Request } from './requests.js';
import { parseSettings } from './settings.js';

/** What a policy module's default export is made from. */
export interface PolicyDefinition<S extends z.ZodType> {
  /** The settings schema; `z.strictObject({...})` refuses unknown fields. */
  settings: S;
  /** Semantic checks beyond parsing: throw `SettingsError` naming the setting. */
  validate?(settings: z.output<S>): void;
  /**
   * Decide about one job: `admit()` (as placed so far), `admit(request.placement)`
   * after changing it, either with `{ priorityCap, preemptible }`,
   * `queue(code, message)` or `reject(code, message, field)`. Read only the parts of
   * `request` the rule needs: each is copied from the host on first access.
   *
   * The decision must depend only on `settings` and `request`, never on an earlier
   * call: the host reuses an instance for later calls of the same plugin, settings
   * and team, and replay and shadow evaluation assume the same input decides alike.
   */
  evaluate(settings: z.output<S>, request: Request): Decision;
  /**
   * Accept, `reorder` or `veto` a preemption the host plans for a higher-priority job
   * (`plan.candidates` in the host's order, least lost work first). Without it the
   * policy accepts. A team's policy is asked only about its own team's jobs and may
   * only accept or veto.
   */
  planPreemption?(settings: z.output<S>, plan: PreemptionPlan): PlanVerdict;
}

/** A policy ready to be exported as a component or run by the harness. */
export interface Policy<T> {
  /** Parse a settings document (no semantic checks). */
  parse(text: string): T;
  /** Parse and validate, as the host's `validate-settings` and `configure` do. */
  check(text: string): T;
  evaluate(settings: T, request: Request): Decision;
  planPreemption(settings: T, plan: PreemptionPlan): PlanVerdict;
}

/** Define a policy; make it the module's default export. */
export function definePolicy<S extends z.ZodType>(def: PolicyDefinition<S>): Policy<z.output<S>> {
  const parse = (text: string) => parseSettings(def.settings, text);
  return {
    parse,
    check(text) {
      const settings = parse(text);
      def.validate?.(settings);
      return settings;
    },
    evaluate: (settings, request) => def.evaluate(settings, request),
    planPreemption: (settings, plan) => def.planPreemption?.(settings, plan) ?? accept(),
  };
}
