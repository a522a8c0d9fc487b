/**
 * Logging from a policy: the host's `log` import inside a component (tagged with the
 * plugin's name and digest; at most 64 lines of 1 KiB per evaluation), a capture buffer
 * when the policy runs natively under the harness.
 */
import type { Level } from './contract.js';

type Sink = (level: Level, message: string) => void;

let sink: Sink = () => {};

/** Where log lines go: the host import (set by the component entry) or a capture. */
export function setLogSink(next: Sink): void {
  sink = next;
}

/** Write one line at `level`. */
export function write(level: Level, message: string): void {
  sink(level, message);
}

export const debug = (message: string): void => write('debug', message);
export const info = (message: string): void => write('info', message);
export const warn = (message: string): void => write('warn', message);
export const error = (message: string): void => write('error', message);
