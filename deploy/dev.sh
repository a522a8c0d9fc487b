#!/usr/bin/env bash
# The README's run command: the gateway on its embedded default (an in-process
# Kubernetes + KubeRay emulator, the reference policy chain; no cluster, no S3).
# Works on a fresh machine of this kind: installs the WebAssembly toolchain for the
# policy plugins if it is missing, installs Ray (ray[default], pinned, in target/ray) if
# it is missing, builds the plugins, then runs `forge-gateway dev` on that Ray: the
# emulated Ray nodes run real `ray start`, so job code can `import ray`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
   && ! { [ -x /usr/bin/rustc ] && [ -d /usr/lib/rustlib/src/rust/library ]; }; then
  echo "installing Debian rustc-web, cargo-web, rust-web-src (to build policy plugins)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc-web cargo-web rust-web-src >/dev/null
fi

cargo run --quiet --release -p forge-plugin-build --bin forge-plugin -- build \
  --target-dir target/plugins --out target/plugins/components \
  plugins/pool-series plugins/team-quota plugins/rwo-guard

# FORGE_DEV_RAY_VENV names another Ray virtualenv (then nothing is installed).
if [ -z "${FORGE_DEV_RAY_VENV:-}" ]; then
  FORGE_DEV_RAY_VENV=$(bash deploy/install-ray.sh "$PWD/target/ray")
  export FORGE_DEV_RAY_VENV
fi

exec cargo run --quiet --release -p forge-gateway --features dev -- dev --plugins-dir target/plugins/components "$@"
