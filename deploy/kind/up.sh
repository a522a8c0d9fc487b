#!/usr/bin/env bash
# Brings Forge up end to end on a throwaway kind cluster, on a machine with a Docker
# engine: kind + the KubeRay operator (Helm), two fake "GPU" worker nodes, the gateway
# image built from this checkout and loaded into kind, the `single` overlay (through
# deploy/kind/overlay), a bearer token, and the sample job submitted with curl and
# followed until it ends. Idempotent: re-running reuses the cluster and the token.
# Tear down with deploy/kind/down.sh. See deploy/kind/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state="$here/.state"

CLUSTER=${FORGE_KIND_CLUSTER:-forge}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.32.2}
KUBERAY_VERSION=${KUBERAY_VERSION:-1.7.0}
LOCAL_PORT=${FORGE_KIND_PORT:-18080}
JOB_TIMEOUT_S=${FORGE_KIND_JOB_TIMEOUT_S:-1200}
# Must match deploy/kind/overlay/kustomization.yaml (framework image) and the gateway's
# default FORGE_CAPSULE_INIT_IMAGE.
RAY_IMAGE=rayproject/ray:2.52.0
INIT_IMAGE=busybox:1.36
GATEWAY_IMAGE=forge-gateway:kind
SERIES=h100
GPUS_PER_NODE=8
NS=starforge
CTX="kind-$CLUSTER"

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'up.sh: %s\n' "$*" >&2; exit 1; }
k() { kubectl --context "$CTX" "$@"; }

log "checking tools"
for tool in docker kind kubectl helm curl jq tar; do
  command -v "$tool" >/dev/null || die "$tool is required (see deploy/kind/README.md)"
done
docker info >/dev/null 2>&1 || die "no Docker engine reachable (docker info failed)"
mkdir -p "$state"

log "kind cluster '$CLUSTER' ($KIND_NODE_IMAGE)"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing the existing cluster"
else
  kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" \
    --config "$here/cluster.yaml" --wait 120s
fi
k cluster-info >/dev/null

log "KubeRay operator $KUBERAY_VERSION (Helm chart kuberay/kuberay-operator)"
helm repo add kuberay https://ray-project.github.io/kuberay-helm/ --force-update >/dev/null
helm repo update kuberay >/dev/null
helm upgrade --install kuberay-operator kuberay/kuberay-operator \
  --kube-context "$CTX" --namespace kuberay-system --create-namespace \
  --version "$KUBERAY_VERSION" --wait --timeout 5m
k wait --for condition=established --timeout=60s crd/rayjobs.ray.io crd/rayclusters.ray.io

log "fake GPU workers: series $SERIES, $GPUS_PER_NODE GPUs each"
# There are no GPUs on kind. FORGE_K8S_GPU_PASSTHROUGH=0 (the overlay) keeps Ray pods
# from requesting nvidia.com/gpu; Ray's logical GPUs still work. The gateway counts
# capacity from each node's nvidia.com/gpu capacity, so it is advertised by hand (the
# Kubernetes "advertise extended resources for a node" procedure; it lasts until the
# node re-registers). forge.dev/gpu-count is a PLACEHOLDER label name for the GPU
# count of GPU-less test nodes, which the gateway will document; set it too.
for node in $(k get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
  k label --overwrite "$node" "starforge/gpu-series=$SERIES" "forge.dev/gpu-count=$GPUS_PER_NODE" >/dev/null
  k patch "$node" --subresource=status --type=json -p "[
    {\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$GPUS_PER_NODE\"},
    {\"op\": \"add\", \"path\": \"/status/allocatable/nvidia.com~1gpu\", \"value\": \"$GPUS_PER_NODE\"}]" >/dev/null
  echo "$node: $(k get "$node" -o jsonpath='{.metadata.labels.starforge/gpu-series} {.status.allocatable.nvidia\.com/gpu}')"
done

log "images: build $GATEWAY_IMAGE, pull $RAY_IMAGE and $INIT_IMAGE, load into kind"
docker build -f "$root/deploy/Dockerfile" -t "$GATEWAY_IMAGE" "$root"
for image in "$RAY_IMAGE" "$INIT_IMAGE"; do
  docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"
done
for image in "$GATEWAY_IMAGE" "$RAY_IMAGE" "$INIT_IMAGE"; do
  kind load docker-image --name "$CLUSTER" "$image"
done

log "namespace $NS and the tokens Secret (no S3 on kind: capsules come from the gateway)"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
if [ ! -s "$state/token" ]; then
  (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$state/token")
fi
token=$(cat "$state/token")
hash=$(docker run --rm "$GATEWAY_IMAGE" hash-token "$token")
cat > "$state/tokens.yaml" <<EOF
tokens:
  - name: kind-demo
    team: team-a
    role: member
    token_sha256: $hash
EOF
k -n "$NS" create secret generic forge-tokens --from-file=tokens.yaml="$state/tokens.yaml" \
  --dry-run=client -o yaml | k apply -f - >/dev/null

log "the gateway: kubectl apply -k deploy/kind/overlay (the single overlay for kind)"
existed=$(k -n "$NS" get deployment/forge-gateway -o name --ignore-not-found)
k apply -k "$here/overlay"
# On a re-run the tokens Secret may have changed under a running pod, which reads it at
# start only: restart it (Recreate) before waiting.
if [ -n "$existed" ]; then
  k -n "$NS" rollout restart deployment/forge-gateway >/dev/null
fi
if ! k -n "$NS" rollout status deployment/forge-gateway --timeout=5m; then
  k -n "$NS" describe pods -l app.kubernetes.io/name=forge-gateway | tail -40 >&2
  k -n "$NS" logs deployment/forge-gateway --tail=60 >&2 || true
  die "the gateway did not become ready"
fi

log "port-forward svc/forge-gateway to 127.0.0.1:$LOCAL_PORT"
k -n "$NS" port-forward svc/forge-gateway "$LOCAL_PORT:80" >"$state/port-forward.log" 2>&1 &
pf=$!
trap 'kill "$pf" 2>/dev/null || true' EXIT
url="http://127.0.0.1:$LOCAL_PORT"
deadline=$((SECONDS + 60))
until curl -fsS "$url/readyz" >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || { cat "$state/port-forward.log" >&2; die "$url/readyz not reachable within 60 s"; }
  sleep 1
done
auth=(-H "Authorization: Bearer $token")
echo "capacity: $(curl -fsS "${auth[@]}" "$url/v1/capacity" | jq -c .)"

log "submit the sample job (deploy/kind/sample)"
tar -C "$here/sample" -czf "$state/code.tar.gz" train.py
status=$(curl -sS -o "$state/submit.json" -w '%{http_code}' "${auth[@]}" \
  -F "spec=@$here/sample/job.json;type=application/json" \
  -F "code=@$state/code.tar.gz;type=application/gzip" "$url/v1/jobs")
[ "$status" = 202 ] || { cat "$state/submit.json" >&2; die "submission answered HTTP $status, not 202"; }
id=$(jq -r .id "$state/submit.json")
echo "job $id: $(jq -r .state "$state/submit.json")"

log "follow job $id (up to $JOB_TIMEOUT_S s: the first Ray image start is slow)"
deadline=$((SECONDS + JOB_TIMEOUT_S))
last=""
while :; do
  curl -fsS "${auth[@]}" "$url/v1/jobs/$id" > "$state/job.json"
  job_state=$(jq -r .state "$state/job.json")
  if [ "$job_state" != "$last" ]; then
    echo "$(date +%T) $job_state $(jq -r '.reason // ""' "$state/job.json")"
    last=$job_state
  fi
  case "$job_state" in
    succeeded | failed | cancelled | timed-out | rejected) break ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    k -n "$NS" get rayjobs,pods -o wide >&2 || true
    curl -sS "${auth[@]}" "$url/v1/jobs/$id/events" >&2 || true
    die "job $id still $job_state after $JOB_TIMEOUT_S s"
  fi
  sleep 5
done

curl -sS "${auth[@]}" "$url/v1/jobs/$id/logs" > "$state/driver.log" || true
echo "--- driver log ($state/driver.log)"
cat "$state/driver.log"
if [ "$job_state" != succeeded ] || ! grep -q 'forge sample: done' "$state/driver.log"; then
  jq . "$state/job.json" >&2
  k -n "$NS" logs deployment/forge-gateway --tail=60 >&2 || true
  die "job $id ended $job_state"
fi

log "done: job $id succeeded"
cat <<EOF
Token (team-a, member): $state/token
Reach the API:  kubectl --context $CTX -n $NS port-forward svc/forge-gateway $LOCAL_PORT:80
Then:           curl -H "Authorization: Bearer \$(cat $state/token)" $url/v1/jobs
Tear down:      bash deploy/kind/down.sh
EOF
