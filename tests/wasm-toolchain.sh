#!/usr/bin/env bash
# Makes sure policy plugins can be built to WebAssembly on this machine: rustup's
# wasm32-unknown-unknown target when installed, otherwise Debian's rustc-web with the
# std sources for -Zbuild-std (../shared/TOOLCHAIN.md), installed when missing.
# Used by tests/run.sh, tests/load/run.sh and tests/bench/run.sh.
set -euo pipefail
if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "rustup target wasm32-unknown-unknown is installed"
elif [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src/rust/library ]; then
  echo "using Debian rustc-web with -Zbuild-std"
else
  echo "installing Debian rustc-web, cargo-web, rust-web-src (std sources for -Zbuild-std)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc-web cargo-web rust-web-src >/dev/null
fi
