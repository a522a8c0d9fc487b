#!/usr/bin/env bash
# Load benchmark of the gateway (release build, loopback, wrk as the load generator).
#
#   bash tests/load/run.sh            # DURATION=15 CONNECTIONS=32 by default
#
# Starts `forge-gateway dev --sim api-only` (a bare emulated API server: RayJobs are
# stored, nothing runs, so the numbers are the gateway's) on 2000 nodes x 8 GPUs with
# tests/load/chain.yaml (reference plugins, quota out of the way), then measures, in
# this order and in the same run:
#   1. baseline: GET /healthz (HTTP stack only);
#   2. dry-run reviews: POST /v1/admission/review (auth + spec validation + the WASM
#      chain), throughput and p50/p99;
#   2b. the same reviews at a fixed rate (RATE, default 1 000 req/s; hey, RATE_WORKERS
#      workers each sending RATE/RATE_WORKERS a second): the latency a steady load
#      sees, which a closed loop at full speed cannot show;
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
RATE_WORKERS="${RATE_WORKERS:-20}"
# The fixed-rate stage asks hey for RATE rounded down to a multiple of RATE_WORKERS.
per_worker=$((RATE / RATE_WORKERS))
# hey reads -q 0 as "no limit": a rate below one request a second per worker is refused.
[ "$per_worker" -ge 1 ] || { echo "RATE ($RATE) must be at least RATE_WORKERS ($RATE_WORKERS)" >&2; exit 2; }
RATE=$((per_worker * RATE_WORKERS))

if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)" >&2
  apt-get install -y -qq wrk >/dev/null
fi
if ! command -v hey >/dev/null; then
  echo "installing hey (Debian package)" >&2
  apt-get install -y -qq hey >/dev/null
fi
bash tests/wasm-toolchain.sh >&2
cargo run --quiet --release -p forge-plugin-build --bin forge-plugin -- build \
  --target-dir target/plugins --out target/plugins/components \
  plugins/pool-series plugins/team-quota plugins/rwo-guard
cargo build --quiet --release -p forge-gateway

data="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
log="$data/gateway.log"
# Throughput is the measure: the per-team submission rate and queue cap are off.
FORGE_DATA_DIR="$data" FORGE_LISTEN="127.0.0.1:$port" RUST_LOG=warn \
  FORGE_SUBMISSIONS_PER_MINUTE=0 FORGE_MAX_QUEUED_PER_TEAM=0 \
  target/release/forge-gateway dev --sim api-only --nodes h100=2000x8 \
  --policy-chain tests/load/chain.yaml >"$log" 2>&1 &
gw=$!
trap 'kill $gw 2>/dev/null; wait $gw 2>/dev/null; rm -rf "$data"' EXIT
url="http://127.0.0.1:$port"
for _ in $(seq 1 300); do
  grep -q "token:" "$log" 2>/dev/null && break
  sleep 0.1
done
FORGE_TOKEN="$(awk '/token:/ {print $2; exit}' "$log")"
[ -n "$FORGE_TOKEN" ] || { cat "$log"; exit 1; }
export FORGE_TOKEN

# Store the capsule once (a multipart submission of the dev sample).
FORGE_CAPSULE="$(curl -sf -H "Authorization: Bearer $FORGE_TOKEN" \
  -F "spec=@$data/sample/job.json" -F "code=@$data/sample/code.zip" "$url/v1/jobs" |
  sed -n 's/.*"capsuleSha256":"\([0-9a-f]*\)".*/\1/p')"
[ -n "$FORGE_CAPSULE" ] || { echo "could not store the capsule" >&2; cat "$log"; exit 1; }
export FORGE_CAPSULE

run() { # name script url
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "tests/load/$2" "$3" |
    awk -v name="$1" '/^RESULT/ {print name, $0}'
}
metric() { curl -sf "$url/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

base="$(run baseline health.lua "$url/healthz")"; echo "$base"
rev="$(run review review.lua "$url/v1/admission/review")"; echo "$rev"
# hey paces each worker with a ticker; at 50 req/s a worker has 20 ms per request, far
# above a review's answer, so a slow answer does not delay the next send much.
fixed="$(hey -z "${DURATION}s" -c "$RATE_WORKERS" -q "$per_worker" -m POST \
  -T application/json -H "Authorization: Bearer $FORGE_TOKEN" -D tests/load/review.json \
  "$url/v1/admission/review" | awk '
    /Requests\/sec:/ { rps = $2 }
    / 50% in / { p50 = $3 }
    / 99% in / { p99 = $3 }
    /^ *\[[0-9]+\]/ { total += $2; if ($1 != "[200]") bad += $2 }
    END { printf "fixed-rate RESULT requests=%d rps=%.1f non2xx=%d p50_us=%d p99_us=%d\n", total, rps, bad, p50 * 1e6, p99 * 1e6 }')"
echo "$fixed"
before="$(metric 'forge_job_transitions_total{state="dispatched"}')"
before="${before:-0}"
start=$(date +%s.%N)
sub="$(run submit submit.lua "$url/v1/jobs")"; echo "$sub"
# Wait until the dispatcher has drained the queue (no queued job left); the end time is
# the last time the created count moved.
last="$before"; end="$start"; still=0
while [ "$still" -lt 10 ]; do
  now="$(metric 'forge_job_transitions_total{state="dispatched"}')"; now="${now:-0}"
  depth="$(curl -sf -H "Authorization: Bearer $FORGE_TOKEN" "$url/v1/jobs?state=queued&limit=1" | grep -c '"id"' || true)"
  if [ "$now" != "$last" ]; then last="$now"; end=$(date +%s.%N); still=0
  elif [ "$depth" = "0" ]; then still=$((still + 1)); fi
  sleep 0.2
done
rps() { sed -n 's/.*requests=\([0-9]*\) seconds=\([0-9.]*\).*/\1 \2/p' | awk '{printf "%.1f", $1 / $2}'; }
b=$(echo "$base" | rps); r=$(echo "$rev" | rps); s=$(echo "$sub" | rps)
created=$(( ${last%.*} - ${before%.*} ))
awk -v b="$b" -v r="$r" -v s="$s" -v c="$created" -v t0="$start" -v t1="$end" 'BEGIN {
  printf "baseline %.0f req/s | reviews %.0f req/s (%.2f of baseline) | submits %.0f req/s\n", b, r, r / b, s
  printf "submit -> RayJob created: %d RayJobs in %.2f s = %.0f jobs/s\n", c, t1 - t0, c / (t1 - t0)
}'
# One machine-readable line for tests/bench/run.sh.
p99() { sed -n 's/.*p99_us=\([0-9]*\).*/\1/p'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
awk -v b="$b" -v r="$r" -v s="$s" -v c="$created" -v t0="$start" -v t1="$end" \
  -v rp99="$(echo "$rev" | p99)" -v sp99="$(echo "$sub" | p99)" \
  -v frate="$RATE" -v frps="$(echo "$fixed" | field rps)" -v fp50="$(echo "$fixed" | field p50_us)" \
  -v fp99="$(echo "$fixed" | p99)" -v fbad="$(echo "$fixed" | field non2xx)" 'BEGIN {
  printf "BENCH load healthz_rps=%.0f review_rps=%.0f review_p99_us=%d submit_rps=%.0f submit_p99_us=%d created=%d created_per_s=%.0f fixed_rate=%d fixed_rps=%.0f fixed_p50_us=%d fixed_p99_us=%d fixed_non2xx=%d\n",
    b, r, rp99, s, sp99, c, c / (t1 - t0), frate, frps, fp50, fp99, fbad
}'
