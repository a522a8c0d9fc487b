#!/usr/bin/env bash
# Submit -> RayJob created, on its own: N one-GPU jobs naming a stored capsule are
# submitted as fast as 32 connections go (oha -n N), and the time from the first
# submission to the last RayJob created is the rate (the dispatcher's creates, from
# forge_job_transitions_total{state="dispatched"}).
#
#   bash tests/load/drain.sh           # N=12000; BIN=target/release/forge-gateway
#
# Starts `forge-gateway dev --sim api-only` on 5000 nodes x 8 GPUs (room for every job)
# like tests/load/run.sh. Run it with BIN set to two builds to compare them on the same
# machine (alternate them: a run moves by ±15 % here).
#
#   FLEETS=3 bash tests/load/drain.sh
#
# runs the same against three fleets (`dev --fleets 3`, the 5000 nodes split between
# them): every job's gang fit chooses among the fleets and its RayJob is created in its
# fleet's API server (issue 42 asks for a rate at least the single fleet's).
#
#   API=apart bash tests/load/drain.sh
#
# runs the API server as its own process (forge-kubesim, as a real cluster's is) and
# the gateway with `serve` against it, and reports the CPU of each per job: the
# gateway's own cost, without the API server's it carries in the embedded mode.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
N="${N:-12000}"
# shellcheck source=tests/load/gateway.sh
. tests/load/gateway.sh
start_for_jobs
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before="$(dispatched)"
i0="$(initializing)"
c0="$(cpu "$gw")"
a0="$( [ -n "${api:-}" ] && cpu "$api" || echo 0)"
t0=$(date +%s.%N)
"$oha" -n "$N" -c 32 --no-tui --output-format quiet -m POST -T application/json \
  -H "Authorization: Bearer $FORGE_TOKEN" -D "$data/body.json" "$url/v1/jobs"
t_sub=$(date +%s.%N)
wait_dispatched "$before" "$t_sub"
c1="$(cpu "$gw")"
a1="$( [ -n "${api:-}" ] && cpu "$api" || echo 0)"
# The lifecycle controller's share comes after: every created RayJob's job recorded as
# initializing (its watch saw the RayJob). The CPU through then is the whole of a job.
wait_settled "$(( ${last%.*} - ${before%.*} ))" "${i0%.*}"
c2="$(cpu "$gw")"
awk -v n="$N" -v c="$(( ${last%.*} - ${before%.*} ))" -v t0="$t0" -v ts="$t_sub" -v te="$t_end" \
  -v cpu="$(( c1 - c0 ))" -v cpu_all="$(( c2 - c0 ))" -v tset="$t_settled" -v apicpu="$(( a1 - a0 ))" -v apart="${api:+1}" -v hz="$(getconf CLK_TCK)" \
  -v suffix="$( [ "${FLEETS:-1}" -gt 1 ] && echo "_fleets${FLEETS}" || true)" 'BEGIN {
  printf "submitted %d jobs in %.2f s (%.0f req/s); %d RayJobs created in %.2f s = %.0f jobs/s; gateway CPU %.2f s = %.0f µs a job\n", n, ts - t0, n / (ts - t0), c, te - t0, c / (te - t0), cpu / hz, 1e6 * cpu / hz / c
  printf "every job initializing (lifecycle caught up) after %.2f s; gateway CPU through then %.0f µs a job\n", tset - t0, 1e6 * cpu_all / hz / c
  if (apart) {
    printf "API server apart: its CPU %.2f s = %.0f µs a job\n", apicpu / hz, 1e6 * apicpu / hz / c
    printf "BENCH drain_apart jobs=%d submit_rps=%.0f created=%d created_per_s=%.0f cpu_us_per_job=%.0f api_cpu_us_per_job=%.0f settled_s=%.2f\n", n, n / (ts - t0), c, c / (te - t0), 1e6 * cpu / hz / c, 1e6 * apicpu / hz / c, tset - t0
  } else {
    printf "BENCH drain%s jobs=%d submit_rps=%.0f created=%d created_per_s=%.0f cpu_us_per_job=%.0f settled_s=%.2f cpu_settled_us_per_job=%.0f\n", suffix, n, n / (ts - t0), c, c / (te - t0), 1e6 * cpu / hz / c, tset - t0, 1e6 * cpu_all / hz / c
  }
}'
