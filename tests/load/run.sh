#!/usr/bin/env bash
# Load benchmark of the gateway (release build, loopback, wrk as the load generator).
#
#   bash tests/load/run.sh            # DURATION=15 CONNECTIONS=32 by default
#
# Starts `forge-gateway dev --sim api-only` (a bare emulated API server: RayJobs are
# stored, nothing runs, so the numbers are the gateway's) on 5000 nodes x 8 GPUs (room
# for every submission: the dispatcher is measured, not the cluster's size) with
# tests/load/chain.yaml (reference plugins, quota out of the way), then measures, in
# this order and in the same run:
#   1. baseline: GET /healthz (HTTP stack only);
#   2. dry-run reviews: POST /v1/admission/review (auth + spec validation + the WASM
#      chain), throughput and p50/p99;
#   2b. at a fixed rate (RATE, default 1 000 req/s, arrivals evenly spaced; oha with
#      RATE_CONNECTIONS connections and latency measured from each request's scheduled
#      start, so a stall is not hidden): GET /healthz as the baseline, then the reviews.
#      This is the latency a steady load sees, which a closed loop cannot show.
#      (hey was used before and is not: its -q paces each worker with its own ticker,
#      all started together, so 20 workers × 50 req/s send bursts of 20 every 20 ms and
#      the burst's queue was measured, not the gateway);
#   3. submissions: POST /v1/jobs naming a stored capsule (durable insert + decision),
#      and submit → RayJob-created throughput (the dispatcher's creates, from
#      forge_job_transitions_total{state="dispatched"}).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
DURATION="${DURATION:-15}"
CONNECTIONS="${CONNECTIONS:-32}"
THREADS="${THREADS:-1}"
RATE="${RATE:-1000}"
RATE_CONNECTIONS="${RATE_CONNECTIONS:-20}"
case "$RATE" in ''|*[!0-9]*|0) echo "RATE ($RATE) must be a whole number of requests a second, at least 1" >&2; exit 2 ;; esac

if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)" >&2
  apt-get install -y -qq wrk >/dev/null
fi
# shellcheck source=tests/load/gateway.sh
. tests/load/gateway.sh
ensure_oha
build_gateway
start_gateway target/release/forge-gateway

run() { # name script url
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "tests/load/$2" "$3" |
    awk -v name="$1" '/^RESULT/ {print name, $0}'
}

base="$(run baseline health.lua "$url/healthz")"; echo "$base"
rev="$(run review review.lua "$url/v1/admission/review")"; echo "$rev"
fixed_rate() { # name url [oha options...]: one RESULT line from oha's JSON report
  local name="$1" target="$2"; shift 2
  "$oha" -z "${DURATION}s" -c "$RATE_CONNECTIONS" -q "$RATE" --latency-correction --no-tui \
    --output-format json "$@" "$target" | python3 tests/load/oha_result.py "$name"
}
fixed_base="$(fixed_rate fixed-healthz "$url/healthz")"; echo "$fixed_base"
fixed="$(fixed_rate fixed-review "$url/v1/admission/review" -m POST -T application/json \
  -H "Authorization: Bearer $FORGE_TOKEN" -D tests/load/review.json)"
echo "$fixed"
before="$(dispatched)"
start=$(date +%s.%N)
sub="$(run submit submit.lua "$url/v1/jobs")"; echo "$sub"
wait_dispatched "$before" "$start"
end="$t_end"
left="$(curl -sf "$url/metrics" | awk '$1 ~ /^forge_queue_depth/ {n += $2} END {print n + 0}')"
rps() { sed -n 's/.*requests=\([0-9]*\) seconds=\([0-9.]*\).*/\1 \2/p' | awk '{printf "%.1f", $1 / $2}'; }
b=$(echo "$base" | rps); r=$(echo "$rev" | rps); s=$(echo "$sub" | rps)
created=$(( ${last%.*} - ${before%.*} ))
awk -v b="$b" -v r="$r" -v s="$s" -v c="$created" -v t0="$start" -v t1="$end" -v left="$left" 'BEGIN {
  printf "baseline %.0f req/s | reviews %.0f req/s (%.2f of baseline) | submits %.0f req/s\n", b, r, r / b, s
  printf "submit -> RayJob created: %d RayJobs in %.2f s = %.0f jobs/s (%d left queued, for want of room)\n", c, t1 - t0, c / (t1 - t0), left
}'
# One machine-readable line for tests/bench/run.sh.
p99() { sed -n 's/.*p99_us=\([0-9]*\).*/\1/p'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
awk -v b="$b" -v r="$r" -v s="$s" -v c="$created" -v t0="$start" -v t1="$end" \
  -v rp99="$(echo "$rev" | p99)" -v sp99="$(echo "$sub" | p99)" \
  -v frate="$RATE" -v frps="$(echo "$fixed" | field rps)" -v fp50="$(echo "$fixed" | field p50_us)" \
  -v fp99="$(echo "$fixed" | p99)" -v fbad="$(echo "$fixed" | field non2xx)" \
  -v hp50="$(echo "$fixed_base" | field p50_us)" -v hp99="$(echo "$fixed_base" | p99)" 'BEGIN {
  printf "BENCH load healthz_rps=%.0f review_rps=%.0f review_p99_us=%d submit_rps=%.0f submit_p99_us=%d created=%d created_per_s=%.0f fixed_rate=%d fixed_rps=%.0f fixed_p50_us=%d fixed_p99_us=%d fixed_non2xx=%d fixed_healthz_p50_us=%d fixed_healthz_p99_us=%d\n",
    b, r, rp99, s, sp99, c, c / (t1 - t0), frate, frps, fp50, fp99, fbad, hp50, hp99
}'
