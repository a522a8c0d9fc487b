#!/usr/bin/env bash
# The compiler of the workspace's own crates in the test command's one build
# (RUSTC_WORKSPACE_WRAPPER, set by tests/run.sh): Clippy's driver, which is rustc with
# Clippy's lints, with every warning an error. The build is then the lint, and CI no
# longer compiles the whole dependency tree a second time in check mode for
# `cargo clippy` (~4 minutes on 2 cores). Dependencies are compiled by plain rustc.
#
# cargo runs it as `clippy-rustc.sh <rustc> <rustc's arguments…>`, which is how
# clippy-driver expects to be called as a wrapper.
set -euo pipefail
driver="$(dirname "$(rustup which rustc)")/clippy-driver"
exec "$driver" "$@" -D warnings
