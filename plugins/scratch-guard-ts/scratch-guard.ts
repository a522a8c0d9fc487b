/**
 * scratch-guard: keep throw-away jobs off reserved GPUs and out of the way.
 *
 * A *scratch* job is one whose name starts with `prefix` (`tmp-`). Scratch jobs may not
 * run on `reserved` series (rejected at the pool that asks for one), may use at most
 * `max_gpus` GPUs (rejected), and only run on idle GPUs: while a series has fewer free
 * GPUs than the job needs there, the job is queued. Admitted scratch jobs have their
 * pods labelled `<label>=true` (setting `label`, default `forge.io/scratch`). Other jobs pass
 * unchanged, reading nothing but the job: their admit hands no placement back.
 *
 * The same rule as the Rust crate `plugins/scratch-guard` and the Python plugin
 * `plugins/scratch-guard-py`; all three answer the table in
 * `tests/fixtures/plugins/scratch-guard-cases.json` identically.
 *
 * Settings: `{"prefix": "tmp-", "reserved": ["h100"], "max_gpus": 16}`
 */
import {
  SettingsError,
  admit,
  definePolicy,
  gpusBySeries,
  poolSeries,
  queue,
  reject,
  seriesCapacity,
  setLabel,
  totalGpus,
  z,
} from 'forge-policy';

export default definePolicy({
  settings: z.strictObject({
    prefix: z.string().default('tmp-'),
    reserved: z.array(z.string()).default([]),
    max_gpus: z.number().int().default(16),
    label: z.string().default('forge.io/scratch'),
  }),

  validate(s) {
    if (s.prefix === '') throw new SettingsError('prefix must not be empty');
    s.reserved.forEach((series, i) => {
      if (series.trim() === '') throw new SettingsError(`reserved[${i}] must not be empty`);
    });
    if (s.max_gpus < 1) throw new SettingsError('max_gpus must be at least 1');
  },

  evaluate(s, req) {
    const job = req.job;
    if (!job.name.startsWith(s.prefix)) return admit();
    for (let i = 0; i < job.pools.length; i++) {
      const series = poolSeries(req, i);
      if (series !== undefined && s.reserved.includes(series)) {
        return reject(
          'scratch.reserved-series',
          `scratch job \`${job.name}\` (its name starts with \`${s.prefix}\`) may not use ` +
            `the reserved series ${series}; use another series or rename the job`,
          `pools[${i}].series`,
        );
      }
    }
    const total = totalGpus(job);
    if (total > s.max_gpus) {
      return reject(
        'scratch.too-large',
        `scratch jobs may use at most ${s.max_gpus} GPUs; this one asks for ${total}`,
        'pools',
      );
    }
    for (const [series, needed] of gpusBySeries(req)) {
      if (series === undefined) continue;
      const free = seriesCapacity(req, series)?.free ?? 0;
      if (free < needed) {
        return queue(
          'scratch.idle-only',
          `scratch jobs only use idle GPUs: ${series} has ${free} free, this job needs ${needed}`,
        );
      }
    }
    for (const pool of req.placement.pools) setLabel(pool, s.label, 'true');
    return admit(req.placement);
  },
});
