/**
 * The component's exports: `forge-plugin build` bundles an entry module that does
 * `export const { validateSettings, configure, evaluate, planPreemption } =
 * exportPolicy(policy, log)` with the host's `log` import, and componentize-js binds
 * them to the world's exports.
 *
 * The host calls `configure` once per instance with the link's settings; they are
 * parsed and checked there and kept for every later `evaluate` and `planPreemption`
 * of the instance. `evaluate` wraps the borrowed request handle in a lazy `Request`.
 */
import type { Decision, Level, PlanVerdict, PreemptionPlan } from './contract.js';
import * as log from './log.js';
import type { Policy } from './policy.js';
import { Request, type RequestHandle } from './requests.js';
import { SettingsError } from './settings.js';

export interface WorldExports {
  validateSettings(settings: string): void;
  configure(settings: string): void;
  evaluate(request: RequestHandle): Decision;
  planPreemption(plan: PreemptionPlan): PlanVerdict;
}

/** The world implementation for a policy, logging through `hostLog`. */
export function exportPolicy<T>(
  policy: Policy<T>,
  hostLog: (level: Level, message: string) => void,
): WorldExports {
  log.setLogSink(hostLog);
  // The settings `configure` kept (boxed: a policy's settings may be any value).
  let configured: { settings: T } | undefined;
  const check = (settings: string): T => {
    try {
      return policy.check(settings);
    } catch (e) {
      // A thrown string becomes the `err` of `result<_, string>`.
      if (e instanceof SettingsError) throw e.message;
      throw e;
    }
  };
  const settings = (): T => {
    if (configured === undefined) {
      // The host configures every instance first; without settings the plugin fails
      // closed: the exception traps.
      const message = 'called before configure';
      log.error(message);
      throw new Error(message);
    }
    return configured.settings;
  };
  return {
    validateSettings(text) {
      check(text);
    },
    configure(text) {
      configured = { settings: check(text) };
    },
    evaluate(handle) {
      return policy.evaluate(settings(), Request.fromHost(handle));
    },
    planPreemption(plan) {
      return policy.planPreemption(settings(), plan);
    },
  };
}
