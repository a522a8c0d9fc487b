#!/usr/bin/env bash
# The README's run command: the gateway on its embedded default (an in-process
# Kubernetes + KubeRay emulator, the reference policy chain; no cluster, no S3).
# Works on a fresh machine of this kind: installs the WebAssembly toolchain for the
# policy plugins if it is missing, builds the plugins, then runs `forge-gateway dev`.
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

exec cargo run --quiet --release -p forge-gateway -- dev --plugins-dir target/plugins/components "$@"
