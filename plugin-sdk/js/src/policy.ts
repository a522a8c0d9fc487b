/**
 * `definePolicy`: a zod schema for the settings, an optional semantic check and a pure
 * decision function.
 */
import type { z } from 'zod';

import type { Decision, Request } from './contract.js';
import { parseSettings } from './settings.js';

/** What a policy module's default export is made from. */
export interface PolicyDefinition<S extends z.ZodType> {
  /** The settings schema; `z.strictObject({...})` refuses unknown fields. */
  settings: S;
  /** Semantic checks beyond parsing: throw `SettingsError` naming the setting. */
  validate?(settings: z.output<S>): void;
  /**
   * Decide about one job: `admit(request.placement)` (possibly extended),
   * `queue(code, message)` or `reject(code, message, field)`.
   */
  evaluate(settings: z.output<S>, request: Request): Decision;
}

/** A policy ready to be exported as a component or run by the harness. */
export interface Policy<T> {
  /** Parse a settings document (no semantic checks). */
  parse(text: string): T;
  /** Parse and validate, as the host's `validate-settings` does. */
  check(text: string): T;
  evaluate(settings: T, request: Request): Decision;
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
  };
}
