#!/usr/bin/env bash
# Real Ray in `forge-gateway dev` (release build), timed by tests/bench/ray_dev.py:
# submit -> the driver's first output line and -> the program's result on a 2-machine
# gang (p50 over ROUNDS, default 5), each Ray node's start and memory, a 3-machine
# gang's memory, and the same program on a bare 2-node Ray started by hand as the
# baseline. Prints `BENCH ray_dev …` and `BENCH ray_bare …` lines.
#
#   bash tests/bench/ray_dev.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
venv=$(bash deploy/install-ray.sh "$PWD/target/ray")
bash tests/wasm-toolchain.sh >/dev/null
cargo build --quiet --release -p forge-gateway --features dev --bin forge-gateway
cargo run --quiet --release -p forge-plugin-build --bin forge-plugin -- build \
  --target-dir target/plugins --out target/plugins/components \
  plugins/pool-series plugins/team-quota plugins/rwo-guard >/dev/null

work=$(mktemp -d "$PWD/target/bench-ray-dev.XXXXXX")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
FORGE_LISTEN="127.0.0.1:$port" FORGE_DATA_DIR="$work/data" RUST_LOG=warn \
  target/release/forge-gateway dev --nodes h100=3x2 --ray-venv "$venv" \
  --plugins-dir target/plugins/components >"$work/dev.log" 2>&1 &
dev=$!
cleanup() { kill "$dev" 2>/dev/null || true; wait "$dev" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 600); do
  grep -q 'token:' "$work/dev.log" && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  kill -0 "$dev" 2>/dev/null || { cat "$work/dev.log" >&2; exit 1; }
  sleep 0.1
done
token=$(awk '/token:/ {print $2; exit}' "$work/dev.log")
"$venv/bin/python" tests/bench/ray_dev.py "http://127.0.0.1:$port" "$token" \
  "$work/data/kubeconfig" starforge "$rounds" "$venv/bin"
