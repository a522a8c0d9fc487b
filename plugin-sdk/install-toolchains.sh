#!/usr/bin/env bash
# Installs the Python and TypeScript SDK toolchains from the registries, inside the
# clone (nothing global, no cache outside it):
#   - target/sdk/python: a venv with componentize-py, dacite, pytest
#     (plugin-sdk/python/requirements.txt, pinned);
#   - plugin-sdk/js/node_modules: jco, componentize-js, esbuild, typescript, zod
#     (`npm ci` from the committed plugin-sdk/js/package-lock.json).
# Idempotent: a step whose pinned inputs are unchanged since it last ran is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=target/sdk
mkdir -p "$tools"
export PIP_CACHE_DIR="$PWD/$tools/pip-cache"
export npm_config_cache="$PWD/$tools/npm-cache"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

py_key=$(sha256sum plugin-sdk/python/requirements.txt | cut -c1-16)
if stamp_ok "$tools/python/.installed" "$py_key"; then
  echo "python toolchain: up to date ($tools/python)"
else
  echo "python toolchain: installing into $tools/python"
  rm -rf "$tools/python"
  python3 -m venv "$tools/python"
  "$tools/python/bin/pip" install --quiet --disable-pip-version-check \
    -r plugin-sdk/python/requirements.txt
  echo "$py_key" > "$tools/python/.installed"
fi

js_key=$(sha256sum plugin-sdk/js/package-lock.json | cut -c1-16)
if stamp_ok plugin-sdk/js/node_modules/.installed "$js_key"; then
  echo "typescript toolchain: up to date (plugin-sdk/js/node_modules)"
else
  echo "typescript toolchain: npm ci in plugin-sdk/js"
  (cd plugin-sdk/js && npm ci --no-audit --no-fund --loglevel=error)
  echo "$js_key" > plugin-sdk/js/node_modules/.installed
fi
