/**
 * The component's exports: `forge-plugin build` bundles an entry module that does
 * `export const { validateSettings, evaluate } = exportPolicy(policy, log)` with the
 * host's `log` import, and componentize-js binds them to the world's exports.
 */
import type { Decision, Level, Request } from './contract.js';
import * as log from './log.js';
import type { Policy } from './policy.js';
import { SettingsError } from './settings.js';

export interface WorldExports {
  validateSettings(settings: string): void;
  evaluate(settings: string, request: Request): Decision;
}

/** The world implementation for a policy, logging through `hostLog`. */
export function exportPolicy<T>(
  policy: Policy<T>,
  hostLog: (level: Level, message: string) => void,
): WorldExports {
  log.setLogSink(hostLog);
  return {
    validateSettings(settings) {
      try {
        policy.check(settings);
      } catch (e) {
        // A thrown value becomes the `err` of `result<_, string>`.
        if (e instanceof SettingsError) throw e.message;
        throw e;
      }
    },
    evaluate(settings, request) {
      // Settings passed validate-settings before the chain was activated; if they no
      // longer parse the plugin fails closed: the exception traps.
      let parsed: T;
      try {
        parsed = policy.parse(settings);
      } catch (e) {
        log.error((e as Error).message);
        throw e;
      }
      return policy.evaluate(parsed, request);
    },
  };
}
