#!/usr/bin/env bash
# Installs the Python and TypeScript SDK toolchains from the registries, inside the
# clone (nothing global, no cache outside it):
#   - target/sdk/python: a venv with componentize-py, dacite, pytest
#     (plugin-sdk/python/requirements.txt, pinned);
#   - plugin-sdk/js/node_modules: jco, componentize-js, esbuild, typescript, zod
#     (`npm ci` from the committed plugin-sdk/js/package-lock.json).
# Idempotent: a step whose pinned inputs are unchanged since it last ran is skipped.
# Arguments `python` / `ts` install only that toolchain (default: both). A plugin
# scaffolded by `forge plugin new --lang python|ts` vendors this script with the SDK
# (`vendor/plugin-sdk/`): run there, it installs into the plugin's `vendor/`.
set -euo pipefail
py=1 ts=1
if [ $# -gt 0 ]; then
  py=0 ts=0
  for lang in "$@"; do
    case "$lang" in
      python) py=1 ;;
      ts) ts=1 ;;
      *) echo "usage: $0 [python] [ts]" >&2; exit 2 ;;
    esac
  done
fi
cd "$(dirname "$0")/.."
tools=target/sdk
mkdir -p "$tools"
export PIP_CACHE_DIR="$PWD/$tools/pip-cache"
export npm_config_cache="$PWD/$tools/npm-cache"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
key() { sha256sum "$1" | cut -c1-16; }

if [ "$py" = 0 ]; then
  :
elif stamp_ok "$tools/python/.installed" "$(key plugin-sdk/python/requirements.txt)"; then
  echo "python toolchain: up to date ($tools/python)"
else
  echo "python toolchain: installing into $tools/python"
  rm -rf "$tools/python"
  python3 -m venv "$tools/python"
  "$tools/python/bin/pip" install --quiet --disable-pip-version-check \
    -r plugin-sdk/python/requirements.txt
  key plugin-sdk/python/requirements.txt > "$tools/python/.installed"
fi

if [ "$ts" = 0 ]; then
  :
elif stamp_ok plugin-sdk/js/node_modules/.installed "$(key plugin-sdk/js/package-lock.json)"; then
  echo "typescript toolchain: up to date (plugin-sdk/js/node_modules)"
else
  echo "typescript toolchain: npm ci in plugin-sdk/js"
  (cd plugin-sdk/js && npm ci --no-audit --no-fund --loglevel=error)
  key plugin-sdk/js/package-lock.json > plugin-sdk/js/node_modules/.installed
fi
