#!/usr/bin/env bash
# Idle cost at scale: what the gateway spends when nothing happens but it has many
# RayJobs (its periodic scans: the lifecycle resync, the orphan scan, the NetworkPolicy
# sweep, the dispatcher's idle pass).
#
#   bash tests/load/idle.sh            # N=12000 jobs; BIN=target/release/forge-gateway
#
# Starts `forge-gateway dev --sim api-only` on 5000 nodes x 8 GPUs, submits N one-GPU
# jobs naming a stored capsule (oha, 32 connections), waits until none is queued, lets
# it settle for 15 s, then reports the CPU seconds the process used over 30 s (from
# /proc). Run it with BIN set to two builds to compare them on the same machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
N="${N:-12000}"
# shellcheck source=tests/load/gateway.sh
. tests/load/gateway.sh
start_for_jobs
"$oha" -n "$N" -c 32 --no-tui --output-format quiet -m POST -T application/json \
  -H "Authorization: Bearer $FORGE_TOKEN" -D "$data/body.json" "$url/v1/jobs"
until [ "$(queued_now)" = 0 ]; do
  sleep 1
done
sleep 15
cpu() { awk '{print $14 + $15}' "/proc/$gw/stat"; }
t0="$(cpu)"; sleep 30; t1="$(cpu)"
awk -v a="$t0" -v b="$t1" -v n="$(dispatched)" -v hz="$(getconf CLK_TCK)" 'BEGIN {
  printf "idle with %d RayJobs: %.2f CPU-s in 30 s = %.0f %% of one core\n", n, (b - a) / hz, 100 * (b - a) / hz / 30
  printf "BENCH idle rayjobs=%d cpu_percent=%.0f\n", n, 100 * (b - a) / hz / 30
}'
