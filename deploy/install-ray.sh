#!/usr/bin/env bash
# Installs Ray into a virtualenv inside the clone (default target/ray) when it is
# missing or another version: the emulated cluster's Ray nodes, submitters and drivers
# run on it (forge-kubesim --ray-venv, forge-gateway dev's FORGE_DEV_RAY_VENV, the tests'
# FORGE_TEST_RAY_VENV). The version is FORGE_KUBERAY_RAY_VERSION's dev default, 2.55.1,
# which PyPI serves. Prints the venv's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${FORGE_KUBERAY_RAY_VERSION:-2.55.1}"
venv="${1:-$PWD/target/ray}"
have=$("$venv/bin/python" -c 'import ray, ray.dashboard; print(ray.__version__)' 2>/dev/null || true)
if [ "$have" = "$version" ]; then
  echo "ray[default] $have is installed in $venv" >&2
else
  echo "installing ray[default]==$version into $venv (pip cache in target/pip-cache)" >&2
  python3 -m venv "$venv"
  PIP_CACHE_DIR="$PWD/target/pip-cache" "$venv/bin/pip" install --quiet \
    --disable-pip-version-check "ray[default]==$version" >&2
fi
echo "$venv"
