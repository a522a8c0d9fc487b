#!/usr/bin/env bash
# Deletes the kind cluster made by deploy/kind/up.sh (everything in it goes with it)
# and the local state (token, logs). Images stay in the local Docker engine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CLUSTER=${FORGE_KIND_CLUSTER:-forge}
command -v kind >/dev/null || { echo "down.sh: kind is required" >&2; exit 1; }
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind delete cluster --name "$CLUSTER"
else
  echo "no kind cluster named $CLUSTER"
fi
rm -rf "$here/.state"
