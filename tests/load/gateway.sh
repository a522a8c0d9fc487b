# Sourced by the load scripts (tests/load/run.sh, idle.sh, drain.sh): the pieces they
# share. Expects `root` (the repository) and runs from it.

OHA_VERSION=1.16.0
# oha (crates.io) is built once into the clone's target/tools: no Debian package paces
# requests evenly.
oha="$root/target/tools/bin/oha"
ensure_oha() {
  if ! "$oha" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
    echo "installing oha $OHA_VERSION into target/tools (cargo install, once)" >&2
    cargo install --quiet --locked oha --version "$OHA_VERSION" --root "$root/target/tools"
  fi
}

# The release gateway and the reference plugins it loads.
build_gateway() {
  bash tests/wasm-toolchain.sh >&2
  cargo run --quiet --release -p forge-plugin-build --bin forge-plugin -- build \
    --target-dir target/plugins --out target/plugins/components \
    plugins/pool-series plugins/team-quota plugins/rwo-guard
  cargo build --quiet --release -p forge-gateway
}

# start_gateway BIN: `BIN dev --sim api-only` on 5000 nodes x 8 GPUs (room for every
# submission: the gateway is measured, not the cluster's size) with tests/load/chain.yaml,
# the per-team submission rate and queue cap off (throughput is the measure). Sets
# `gw` (its pid), `data`, `url`, and exports FORGE_TOKEN and FORGE_CAPSULE (the dev
# sample's capsule, stored once by a multipart submission). Stopped on exit.
start_gateway() {
  data="$(mktemp -d)"
  local port=$((20000 + RANDOM % 20000)) log="$data/gateway.log"
  FORGE_DATA_DIR="$data" FORGE_LISTEN="127.0.0.1:$port" RUST_LOG=warn \
    FORGE_SUBMISSIONS_PER_MINUTE=0 FORGE_MAX_QUEUED_PER_TEAM=0 \
    "$1" dev --sim api-only --nodes h100=5000x8 \
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
  FORGE_CAPSULE="$(curl -sf -H "Authorization: Bearer $FORGE_TOKEN" \
    -F "spec=@$data/sample/job.json" -F "code=@$data/sample/code.zip" "$url/v1/jobs" |
    sed -n 's/.*"capsuleSha256":"\([0-9a-f]*\)".*/\1/p')"
  [ -n "$FORGE_CAPSULE" ] || { echo "could not store the capsule" >&2; cat "$log"; exit 1; }
  export FORGE_CAPSULE
}

# How many jobs are queued, as the store says through the API (0 or 1: enough to know).
queued_now() {
  curl -sf -H "Authorization: Bearer $FORGE_TOKEN" "$url/v1/jobs?state=queued&limit=1" |
    grep -c '"id"' || true
}

# start_for_jobs: oha, then `$BIN` (when unset: the release gateway, built) started as
# above, and `$data/body.json`, a one-GPU job naming the stored capsule, for oha -D.
start_for_jobs() {
  ensure_oha
  if [ -z "${BIN:-}" ]; then
    build_gateway
    BIN=target/release/forge-gateway
  fi
  start_gateway "$BIN"
  printf '{"capsule":"%s","spec":{"name":"load","framework":"nemo-rl","entrypoint":"python3 train.py","pools":[{"name":"train","nodes":1,"gpusPerNode":1}]}}' \
    "$FORGE_CAPSULE" >"$data/body.json"
}

# RayJobs created so far (forge_job_transitions_total{state="dispatched"}).
dispatched() {
  local n
  n="$(curl -sf "$url/metrics" | awk '$1 == "forge_job_transitions_total{state=\"dispatched\"}" {print $2}')"
  echo "${n:-0}"
}

# wait_dispatched COUNT T0: waits until the dispatcher is done, COUNT being the
# created count when T0 (a `date +%s.%N`) was taken: no job left queued (the store's view,
# through the API) and the count still for 1 s. A pass may decide for seconds before it
# reports, so the count can stand still meanwhile; only 30 s without a create ends the
# wait with jobs left (no room: nothing ends in `--sim api-only`). Sets `last` (the
# count) and `t_end` (the last time it moved).
wait_dispatched() {
  local now still=0
  last="$1"; t_end="$2"
  while :; do
    now="$(dispatched)"
    if [ "$now" != "$last" ]; then last="$now"; t_end=$(date +%s.%N); still=0
    else still=$((still + 1)); fi
    if [ "$(queued_now)" = "0" ] && [ "$still" -ge 5 ]; then break; fi
    [ "$still" -lt 150 ] || break
    sleep 0.2
  done
}
