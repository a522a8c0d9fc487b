#!/usr/bin/env bash
# What tracing costs the hot path (issue 41): admission-review throughput of the same
# release gateway with tracing off and on (OTEL_EXPORTER_OTLP_ENDPOINT at a real OTLP
# receiver, tests/otlp/receiver.py), in one script session, alternated ROUNDS times
# (default 2) so drift on a shared machine shows. Reviews without a traceparent are
# not traced (parent-based): "on" must stay >= 0.9x "off". A third run sends a sampled
# traceparent with every review, so each is traced and exported: what a trace someone
# asked for costs.
#   bash tests/load/tracing.sh        # DURATION=10 CONNECTIONS=32 ROUNDS=2
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-32}"
ROUNDS="${ROUNDS:-2}"
if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)" >&2
  apt-get install -y -qq wrk >/dev/null
fi
# shellcheck source=tests/load/gateway.sh
. tests/load/gateway.sh
build_gateway
python="$(bash tests/otlp/install.sh "$root/target/otlp")"
rdir="$(mktemp -d)"
"$python" tests/otlp/receiver.py --port-file "$rdir/port" --parent-pid $$ >/dev/null &
receiver=$!
for _ in $(seq 1 100); do [ -s "$rdir/port" ] && break; sleep 0.1; done
endpoint="http://127.0.0.1:$(cat "$rdir/port")"

review() { # label script: one wrk run against the gateway started last
  wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "tests/load/$2" \
    "$url/v1/admission/review" | awk -v name="$1" '/^RESULT/ {print name, $0}'
}
stop() { kill "$gw" 2>/dev/null || true; wait "$gw" 2>/dev/null || true; rm -rf "$data"; trap - EXIT; }
results=()
for round in $(seq 1 "$ROUNDS"); do
  start_gateway target/release/forge-gateway
  results+=("$(review "off-$round" review.lua)")
  stop
  OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint" start_gateway target/release/forge-gateway
  results+=("$(review "on-$round" review.lua)")
  results+=("$(review "traced-$round" review_traced.lua)")
  stop
done
# Spans the receiver got (each traced review is a review span and one per plugin): the
# batch exporter drops what overflows its queue (OTEL_BSP_MAX_QUEUE_SIZE) rather than
# slow the gateway down.
spans="$(curl -sf "$endpoint/spans" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["spans"]))')"
kill "$receiver" 2>/dev/null || true
rm -rf "$rdir"
printf '%s\n' "${results[@]}"
printf '%s\n' "${results[@]}" | awk -v spans="$spans" '
  { split($3, r, "="); split($4, s, "="); rps[$1] = r[2] / s[2]; split($1, k, "-"); sum[k[1]] += rps[$1]; n[k[1]]++ }
  END {
    off = sum["off"] / n["off"]; on = sum["on"] / n["on"]; tr = sum["traced"] / n["traced"]
    printf "reviews: tracing off %.0f req/s | on, untraced requests %.0f req/s = %.2fx off (goal >= 0.9x) | every review traced %.0f req/s = %.2fx off (%s spans received)\n", off, on, on / off, tr, tr / off, spans
    printf "BENCH tracing off_rps=%.0f on_rps=%.0f traced_rps=%.0f on_ratio=%.3f traced_ratio=%.3f\n", off, on, tr, on / off, tr / off
  }'
