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
  cargo build --quiet --release -p forge-gateway --features dev
}

# start_gateway BIN: `BIN dev --sim api-only` on 5000 nodes x 8 GPUs (room for every
# submission: the gateway is measured, not the cluster's size) — with FLEETS=N, as N
# emulated clusters (fleets) of 5000/N nodes each (without FLEETS no `--fleets` is
# passed, so a build from before fleets compares too) — with tests/load/chain.yaml,
# the per-team submission rate and queue cap off (throughput is the measure). Sets
# `gw` (its pid), `data`, `url`, and exports FORGE_TOKEN and FORGE_CAPSULE (the dev
# sample's capsule, stored once by a multipart submission). Stopped on exit.
start_gateway() {
  data="$(mktemp -d)"
  local port=$((20000 + RANDOM % 20000)) log="$data/gateway.log"
  FORGE_DATA_DIR="$data" FORGE_LISTEN="127.0.0.1:$port" RUST_LOG=warn \
    FORGE_SUBMISSIONS_PER_MINUTE=0 FORGE_MAX_QUEUED_PER_TEAM=0 \
    "$1" dev --sim api-only ${FLEETS:+--fleets "$FLEETS"} --nodes "h100=$((5000 / ${FLEETS:-1}))x8" \
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
  store_capsule
}

# start_gateway_apart BIN KUBESIM: the API server in its own process, as in a real
# cluster: `KUBESIM --no-controllers` (the bare API server, with a token: TLS like a
# kube-apiserver) on 5000 nodes x 8 GPUs, and `BIN serve` against it through its
# kubeconfig, with tests/load/chain.yaml and a tokens file holding a fresh admin
# token. Sets what start_gateway sets, and `api` (the API server's pid).
start_gateway_apart() {
  data="$(mktemp -d)"
  local port=$((20000 + RANDOM % 20000)) log="$data/gateway.log"
  "$2" --no-controllers --nodes h100=5000x8 --namespaces starforge \
    --token "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
    --kubeconfig "$data/kubeconfig" >"$data/kubesim.out" 2>"$data/kubesim.log" &
  api=$! gw=
  trap 'kill $api $gw 2>/dev/null; wait $api $gw 2>/dev/null; rm -rf "$data"' EXIT
  for _ in $(seq 1 300); do
    grep -q "serving" "$data/kubesim.log" 2>/dev/null && break
    sleep 0.1
  done
  FORGE_TOKEN="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export FORGE_TOKEN
  printf 'tokens:\n  - team: team-a\n    role: admin\n    token_sha256: %s\n' \
    "$(printf %s "$FORGE_TOKEN" | sha256sum | cut -d' ' -f1)" >"$data/tokens.yaml"
  url="http://127.0.0.1:$port"
  KUBECONFIG="$data/kubeconfig" FORGE_DATA_DIR="$data/gateway" FORGE_LISTEN="127.0.0.1:$port" \
    FORGE_PUBLIC_URL="$url" FORGE_TOKENS_FILE="$data/tokens.yaml" RUST_LOG=warn \
    FORGE_K8S_NAMESPACE=starforge FORGE_IMAGE_NEMO_RL=rayproject/ray:2.55.1 \
    FORGE_KUBERAY_RAY_VERSION=2.55.1 \
    FORGE_SUBMISSIONS_PER_MINUTE=0 FORGE_MAX_QUEUED_PER_TEAM=0 \
    "$1" serve --policy-chain tests/load/chain.yaml >"$log" 2>&1 &
  gw=$!
  for _ in $(seq 1 300); do
    curl -sf "$url/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -sf "$url/readyz" >/dev/null || { cat "$log"; exit 1; }
  mkdir -p "$data/sample"
  printf 'print("load")\n' >"$data/sample/train.py"
  (cd "$data/sample" && python3 -c 'import zipfile; z = zipfile.ZipFile("code.zip", "w"); z.write("train.py"); z.close()')
  printf '{"name":"load","framework":"nemo-rl","entrypoint":"python3 train.py","pools":[{"name":"train","nodes":1,"gpusPerNode":1}]}' \
    >"$data/sample/job.json"
  store_capsule
}

# Stores the sample job's capsule with one multipart submission; exports FORGE_CAPSULE.
store_capsule() {
  FORGE_CAPSULE="$(curl -sf -H "Authorization: Bearer $FORGE_TOKEN" \
    -F "spec=@$data/sample/job.json" -F "code=@$data/sample/code.zip" "$url/v1/jobs" |
    sed -n 's/.*"capsuleSha256":"\([0-9a-f]*\)".*/\1/p')"
  [ -n "$FORGE_CAPSULE" ] || { echo "could not store the capsule" >&2; cat "$data/gateway.log"; exit 1; }
  export FORGE_CAPSULE
}

# How many jobs are queued, as the store says through the API (0 or 1: enough to know).
queued_now() {
  curl -sf -H "Authorization: Bearer $FORGE_TOKEN" "$url/v1/jobs?state=queued&limit=1" |
    grep -c '"id"' || true
}

# start_for_jobs: oha, then `$BIN` (when unset: the release gateway, built) started as
# above — with API=apart, against the API server in its own process
# (start_gateway_apart, `$KUBESIM`, when unset the release forge-kubesim, built) — and
# `$data/body.json`, a one-GPU job naming the stored capsule, for oha -D.
start_for_jobs() {
  ensure_oha
  if [ -z "${BIN:-}" ]; then
    build_gateway
    BIN=target/release/forge-gateway
  fi
  if [ "${API:-}" = apart ]; then
    if [ -z "${KUBESIM:-}" ]; then
      cargo build --quiet --release -p forge-kubesim
      KUBESIM=target/release/forge-kubesim
    fi
    start_gateway_apart "$BIN" "$KUBESIM"
  else
    start_gateway "$BIN"
  fi
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

initializing() {
  local n
  n="$(curl -sf "$url/metrics" | awk '$1 == "forge_job_transitions_total{state=\"initializing\"}" {print $2}')"
  echo "${n:-0}"
}

# Waits until the lifecycle controller has recorded `$1` more jobs as initializing than
# the `$2` it had before the run (every RayJob created, seen by its watch; 120 s at
# most). Sets `t_settled`.
wait_settled() {
  for _ in $(seq 1 600); do
    [ $(( $(initializing) - $2 )) -ge "$1" ] && break
    sleep 0.2
  done
  t_settled=$(date +%s.%N)
}
