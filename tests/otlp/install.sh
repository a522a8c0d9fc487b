#!/usr/bin/env bash
# Installs the Python side of the OTLP/HTTP trace receiver the end-to-end tests export to
# (tests/otlp/receiver.py): a venv inside the clone (default target/otlp) holding the
# official `opentelemetry-proto` package from PyPI and its `protobuf` runtime, both pinned.
# Quick when they are installed already (a stamp file in the venv names the pinned
# versions). Progress goes to stderr; stdout is only the venv's python path, e.g.
#   python=$(bash tests/otlp/install.sh "$PWD/target/otlp")
#   "$python" tests/otlp/receiver.py --port-file "$dir/port"
set -euo pipefail
caller_pwd=$PWD
cd "$(dirname "$0")/../.."
proto_version=1.45.2
protobuf_version=7.36.2
venv="${1:-$PWD/target/otlp}"
case "$venv" in
  /*) ;;
  *) venv="$caller_pwd/$venv" ;;
esac
want="opentelemetry-proto==$proto_version protobuf==$protobuf_version"
stamp="$venv/.otlp-receiver-installed"

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$want is installed in $venv" >&2
else
  python=python3
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    # Debian ships the venv module (with ensurepip) separately, as python3-venv.
    echo "installing Debian's python3-venv (python3 -m venv needs it)" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    # python3 on PATH may not be Debian's (pyenv and the like): use Debian's if it is not.
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then python=/usr/bin/python3; fi
  fi
  echo "installing $want into $venv (pip cache in target/pip-cache)" >&2
  "$python" -m venv "$venv" >&2
  rm -f "$stamp"
  PIP_CACHE_DIR="$PWD/target/pip-cache" "$venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check "opentelemetry-proto==$proto_version" \
    "protobuf==$protobuf_version" >&2
  "$venv/bin/python" -c '
import google.protobuf.json_format
import opentelemetry.proto.collector.trace.v1.trace_service_pb2
' >&2
  echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
