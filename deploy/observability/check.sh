#!/usr/bin/env bash
# CI check of deploy/observability/ (tests/run.sh runs it):
#   1. `promtool check rules` and `promtool test rules` of alerts.rules.yml
#      (tests/alerts.test.yml: a firing and a quiet case per alert);
#   2. the PrometheusRule (prometheusrule.yaml) carries exactly the groups of
#      alerts.rules.yml (`check.py drift`; `check.py sync` regenerates it);
#   3. the dashboard (dashboard.json): its shape (`check.py dashboard`), and every PromQL
#      expression in it — panels and template variables, Grafana's variables replaced —
#      parses (`promtool check rules` of a rules file made of them).
# The rendered component is checked by deploy/validate.sh (kustomize, schemas).
#
# Needs promtool: when it is not on PATH, installs Debian's `prometheus` package (the
# package that ships it; no service is started in a container whose policy-rc.d
# forbids it), with sudo when not root. Python 3 with PyYAML: validate.sh's venv
# (target/venv-deploy) if it exists, else python3 if it has PyYAML, else a venv in
# target/venv-observability. Writes nothing outside the clone but that install; its
# scratch files go to target/observability-check.
# Exits non-zero with the failing output on any problem.
# Runnable from any directory: bash deploy/observability/check.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
obs="$root/deploy/observability"
work="$root/target/observability-check"
PYYAML="PyYAML==6.0.2"

log() { printf '==> %s\n' "$*"; }
fail() { printf 'observability/check.sh: FAILED: %s\n' "$*" >&2; exit 1; }

if ! command -v promtool >/dev/null; then
  log "no promtool on PATH: installing Debian's prometheus package (it ships promtool)"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  command -v promtool >/dev/null || fail "the prometheus package installed no promtool"
fi

if [ -x "$root/target/venv-deploy/bin/python" ]; then
  python="$root/target/venv-deploy/bin/python"
elif python3 -c 'import yaml' 2>/dev/null; then
  python=python3
else
  venv="$root/target/venv-observability"
  if ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
    log "installing $PYYAML into ${venv#"$root"/}"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$PYYAML"
  fi
  python="$venv/bin/python"
fi
export PYTHONDONTWRITEBYTECODE=1

rm -rf "$work"
mkdir -p "$work"
problems=0

# Runs a check; on failure prints its whole output (stdout and stderr) and counts it.
check() {
  local what=$1
  shift
  local output
  if output=$("$@" 2>&1); then
    printf '%s\n' "$output" | sed 's/^/   /'
  else
    printf '%s\n' "$output" | sed 's/^/   /' >&2
    printf 'FAILED: %s\n' "$what" >&2
    problems=$((problems + 1))
  fi
}

log "$(promtool --version 2>&1 | head -n 1)"

log "promtool check rules alerts.rules.yml"
check "promtool check rules" promtool check rules "$obs/alerts.rules.yml"

log "promtool test rules tests/alerts.test.yml"
# promtool resolves rule_files against the test file's directory.
check "promtool test rules" promtool test rules "$obs/tests/alerts.test.yml"

log "PrometheusRule (prometheusrule.yaml) carries the groups of alerts.rules.yml"
check "PrometheusRule drift" "$python" "$obs/check.py" drift

log "dashboard.json: shape, and its PromQL through promtool"
check "dashboard shape" "$python" "$obs/check.py" dashboard
check "dashboard PromQL (rules file)" "$python" "$obs/check.py" dashboard-rules "$work/dashboard-queries.rules.yml"
if [ -s "$work/dashboard-queries.rules.yml" ]; then
  check "dashboard PromQL parses" promtool check rules "$work/dashboard-queries.rules.yml"
fi

log "metric families the dashboard and the rules use (dashboard_metrics.py)"
check "dashboard_metrics.py" "$python" "$obs/dashboard_metrics.py"

[ "$problems" -eq 0 ] || fail "$problems check(s) above"
log "deploy/observability is consistent"
