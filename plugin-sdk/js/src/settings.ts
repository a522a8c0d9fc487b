/**
 * Settings: the JSON document a chain link carries, parsed with the policy's zod schema
 * (use `z.strictObject` so unknown fields are refused). Every error names the setting,
 * like the Rust and Python SDKs': `invalid settings: max_gpus: expected number, got "lots"`.
 */
import { z } from 'zod';

/** Settings refused; the message names the offending setting. Throw it from `validate`. */
export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingsError';
  }
}

function at(data: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let v: unknown = data;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function fieldPath(path: ReadonlyArray<PropertyKey>): string {
  return path
    .map((k, i) => (typeof k === 'number' ? `[${k}]` : `${i === 0 ? '' : '.'}${String(k)}`))
    .join('');
}

/** Parse a settings document with `schema`; an empty document is `{}`. */
export function parseSettings<S extends z.ZodType>(schema: S, text: string): z.output<S> {
  let data: unknown;
  try {
    data = text.trim() === '' ? {} : JSON.parse(text);
  } catch (e) {
    throw new SettingsError(`invalid settings: not JSON: ${(e as Error).message}`);
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    const kind = Array.isArray(data) ? 'array' : data === null ? 'null' : typeof data;
    throw new SettingsError(`invalid settings: expected a JSON object, got ${kind}`);
  }
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const names = [...issue.keys].sort().map((k) => `\`${k}\``).join(', ');
    const where = issue.path.length ? `${fieldPath(issue.path)}: ` : '';
    throw new SettingsError(`invalid settings: ${where}unknown field ${names}`);
  }
  const where = fieldPath(issue.path);
  const detail =
    issue.code === 'invalid_type'
      ? `expected ${issue.expected}, got ${JSON.stringify(at(data, issue.path))}`
      : issue.message;
  throw new SettingsError(`invalid settings: ${where ? `${where}: ` : ''}${detail}`);
}
