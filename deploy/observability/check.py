"""Checks (and one generator) of deploy/observability/. Needs PyYAML.

    check.py sync                      write prometheusrule.yaml's spec.groups from
                                       alerts.rules.yml (its metadata is kept)
    check.py drift                     fail unless prometheusrule.yaml's spec.groups
                                       equal alerts.rules.yml's groups
    check.py dashboard                 the dashboard's shape: variables, a title and a
                                       description on every panel, the datasource
                                       variable everywhere, unique ids, the grid
    check.py dashboard-rules OUT.yml   write every PromQL expression of the dashboard
                                       as a recording rule (Grafana's variables
                                       replaced), for `promtool check rules OUT.yml`
    check.py manifests NAME NS FILE    a kustomize render that includes the component
                                       (deploy/validate.sh): deploy/check_manifests.py's
                                       checks with the Secret forge-metrics known, plus
                                       the PodMonitor, PrometheusRule and dashboard
                                       ConfigMap against the gateway and these files

check.sh runs the first four kinds; validate.sh the last. Prints one line per problem
and exits 1 if there is any.
"""

import difflib
import json
import os
import re
import sys

import yaml

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import dashboard_metrics  # noqa: E402

RULES = os.path.join(HERE, "alerts.rules.yml")
PROMETHEUS_RULE = os.path.join(HERE, "prometheusrule.yaml")
DASHBOARD = os.path.join(HERE, "dashboard.json")
METRICS_SECRET = "forge-metrics"
METRICS_KEY = "FORGE_METRICS_TOKEN"
DASHBOARD_CONFIGMAP = "forge-dashboard"

HEADER = """\
# GENERATED from alerts.rules.yml by `python3 deploy/observability/check.py sync`: edit
# that file, then run it (check.sh fails when the two differ). Only metadata is kept
# from this file on a sync. The Prometheus Operator loads it into every Prometheus whose
# ruleSelector matches its labels (e.g. `release: <helm release>` with
# kube-prometheus-stack: add it in your overlay).
"""
DEFAULT_METADATA = {
    "name": "forge-gateway",
    "namespace": "starforge",
    "labels": {"app.kubernetes.io/name": "forge-gateway", "app.kubernetes.io/part-of": "forge"},
}
# Grafana's variables in the dashboard's PromQL, replaced to give promtool plain PromQL.
DURATION_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "window": "1h"}
REQUIRED_VARIABLES = {"datasource": "datasource", "namespace": "query", "team": "query", "series": "query"}


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def rule_groups():
    return load_yaml(RULES)["groups"]


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, _str)


def dump(obj):
    return yaml.dump(obj, Dumper=Dumper, sort_keys=False, width=88, allow_unicode=True)


# --- PrometheusRule ------------------------------------------------------------------


def sync():
    metadata = DEFAULT_METADATA
    if os.path.exists(PROMETHEUS_RULE):
        metadata = (load_yaml(PROMETHEUS_RULE) or {}).get("metadata") or metadata
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": rule_groups()},
    }
    with open(PROMETHEUS_RULE, "w", encoding="utf-8") as f:
        f.write(HEADER + dump(doc))
    print(f"wrote {os.path.relpath(PROMETHEUS_RULE, ROOT)} from {os.path.relpath(RULES, ROOT)}")
    return []


def groups_problems(groups, where):
    expected = rule_groups()
    if groups == expected:
        return []
    def canonical(obj):
        return yaml.dump(obj, Dumper=Dumper, sort_keys=True, width=88, allow_unicode=True).splitlines()

    diff = difflib.unified_diff(
        canonical(expected), canonical(groups),
        "alerts.rules.yml groups", f"{where} spec.groups", lineterm="",
    )
    return [f"ERROR {where}: spec.groups differ from alerts.rules.yml "
            "(run: python3 deploy/observability/check.py sync)\n" + "\n".join(diff)]


def drift():
    doc = load_yaml(PROMETHEUS_RULE)
    problems = []
    if (doc.get("apiVersion"), doc.get("kind")) != ("monitoring.coreos.com/v1", "PrometheusRule"):
        problems.append("ERROR prometheusrule.yaml: not a monitoring.coreos.com/v1 PrometheusRule")
    problems += groups_problems(doc.get("spec", {}).get("groups"), "prometheusrule.yaml")
    if not problems:
        alerts = [r["alert"] for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r]
        print(f"prometheusrule.yaml = alerts.rules.yml: {len(alerts)} alerts ({', '.join(alerts)})")
    return problems


# --- dashboard -----------------------------------------------------------------------


def load_dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard():
    d = load_dashboard()
    problems = []

    def problem(message):
        problems.append(f"ERROR dashboard.json: {message}")

    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        problem(f"schemaVersion {d.get('schemaVersion')!r}: expected 36 or later")
    for key in ("uid", "title", "description"):
        if not d.get(key):
            problem(f"no {key}")
    if d.get("id") is not None:
        problem("id must be null (Grafana assigns it)")
    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    for name, kind in REQUIRED_VARIABLES.items():
        var = variables.get(name)
        if not var or var.get("type") != kind:
            problem(f"no template variable {name} of type {kind}")
    if variables.get("datasource", {}).get("query") != "prometheus":
        problem("the datasource variable must list prometheus data sources")
    for name, var in variables.items():
        if var.get("type") == "query" and var.get("datasource", {}).get("uid") != "${datasource}":
            problem(f"variable {name}: its datasource must be ${{datasource}}")
    ids = set()
    for panel in all_panels(d.get("panels", [])):
        title = panel.get("title")
        where = f"panel {panel.get('id')} {title!r}"
        if not title:
            problem(f"{where}: no title")
        if panel.get("id") in ids or not isinstance(panel.get("id"), int):
            problem(f"{where}: id missing or not unique")
        ids.add(panel.get("id"))
        pos = panel.get("gridPos", {})
        if not all(isinstance(pos.get(k), int) for k in "hwxy") or pos["x"] + pos["w"] > 24:
            problem(f"{where}: gridPos {pos} is not on the 24-column grid")
        if panel.get("type") == "row":
            continue
        if not panel.get("description"):
            problem(f"{where}: no description")
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problem(f"{where}: datasource must be ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets:
            problem(f"{where}: no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            problem(f"{where}: refIds repeat {refs}")
        for t in targets:
            if not t.get("expr"):
                problem(f"{where}: target {t.get('refId')} has no expr")
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problem(f"{where}: target {t.get('refId')}: datasource must be ${{datasource}}")
    titles = [p.get("title") for p in all_panels(d.get("panels", [])) if p.get("type") != "row"]
    for title in sorted({t for t in titles if titles.count(t) > 1}):
        problem(f"panel title {title!r} repeats")
    # `kubectl apply` (client side) keeps a copy in an annotation limited to 256 KiB.
    size = os.path.getsize(DASHBOARD)
    if size > 200_000:
        problem(f"{size} bytes: keep it under 200 kB (kubectl apply's annotation limit)")
    if not problems:
        print(f"dashboard.json: {len(titles)} panels, variables {', '.join(variables)}")
    return problems


def grafana_to_promql(expr):
    """Grafana's variables replaced: durations by a duration, others (in label values)
    by `.*`."""

    def replace(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return DURATION_VARIABLES.get(name.split(":")[0], ".*")

    return re.sub(r"\$\{([^}]+)\}|\$(\w+)|\[\[(\w+)\]\]", replace, expr)


def dashboard_rules(out):
    d = load_dashboard()
    rules = []
    for panel in all_panels(d.get("panels", [])):
        for t in panel.get("targets", []):
            if t.get("expr"):
                record = f"dashboard:panel_{panel['id']}_{t['refId']}"
                rules.append({"record": record, "expr": grafana_to_promql(t["expr"])})
    for var in d.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var.get("query")
            query = query.get("query", "") if isinstance(query, dict) else query
            expr = dashboard_metrics.variable_expression(query or "")
            if expr is None:
                return [f"ERROR dashboard.json: variable {var['name']}: cannot read query {query!r}"]
            rules.append({"record": f"dashboard:variable_{var['name']}", "expr": grafana_to_promql(expr)})
    with open(out, "w", encoding="utf-8") as f:
        f.write(dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    print(f"{len(rules)} dashboard expressions written to {os.path.relpath(os.path.abspath(out), ROOT)}")
    return []


# --- rendered manifests --------------------------------------------------------------


def manifests(name, namespace, path):
    sys.path.insert(0, os.path.dirname(HERE))
    import check_manifests

    # Created out of band like the base's Secrets (forge-metrics.env.example).
    check_manifests.EXTERNAL_SECRETS.add(METRICS_SECRET)

    class Checker(check_manifests.Checker):
        # The overlay the component is rendered with decides the gateway's shape.
        def shape_observability(self, dep):
            self.shape_single(dep)

        def shape_observability_ha(self, dep):
            self.shape_ha(dep)

    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    checker = Checker(name, namespace, docs)
    problems = checker.run()
    deployments = checker.of_kind("Deployment")
    if len(deployments) != 1:
        return problems
    problems += observability_problems(name, namespace, checker, deployments[0])
    if not problems:
        print(f"   [{name}] PodMonitor, PrometheusRule and dashboard ConfigMap match the gateway and deploy/observability/")
    return problems


def observability_problems(name, namespace, checker, dep):
    problems = []

    def problem(obj, message):
        problems.append(f"ERROR [{name}] {obj['kind']}/{obj['metadata']['name']}: {message}")

    pod = dep["spec"]["template"]
    container = next((c for c in pod["spec"]["containers"] if c["name"] == "gateway"), None)
    if container is None:
        problem(dep, "no container gateway")
        return problems
    token = next((v for v in container.get("env", []) if v["name"] == METRICS_KEY), {})
    token_ref = token.get("valueFrom", {}).get("secretKeyRef", {})
    if (token_ref.get("name"), token_ref.get("key")) != (METRICS_SECRET, METRICS_KEY):
        problem(dep, f"{METRICS_KEY} must come from Secret {METRICS_SECRET}, key {METRICS_KEY}")
    ports = {p.get("name") for p in container.get("ports", [])}
    pod_labels = pod["metadata"].get("labels", {})

    monitors = checker.of_kind("PodMonitor")
    if len(monitors) != 1:
        problems.append(f"ERROR [{name}]: expected one PodMonitor, found {len(monitors)}")
    for monitor in monitors:
        spec = monitor["spec"]
        selector = spec.get("selector", {})
        if selector.get("matchExpressions") or not selector.get("matchLabels"):
            problem(monitor, "select the gateway's pods with matchLabels only")
        missing = {k: v for k, v in selector.get("matchLabels", {}).items() if pod_labels.get(k) != v}
        if missing:
            problem(monitor, f"selector {missing} does not match the gateway's pod labels {pod_labels}")
        names = spec.get("namespaceSelector", {}).get("matchNames")
        if spec.get("namespaceSelector", {}).get("any") or (names is not None and names != [namespace]):
            problem(monitor, f"namespaceSelector must be the gateway's namespace ({namespace}) or absent")
        endpoints = spec.get("podMetricsEndpoints") or []
        if not endpoints:
            problem(monitor, "no podMetricsEndpoints")
        for ep in endpoints:
            if ep.get("port") not in ports:
                problem(monitor, f"port {ep.get('port')!r} is not a port of the gateway container {sorted(ports)}")
            if ep.get("path", "/metrics") != "/metrics":
                problem(monitor, f"path {ep.get('path')!r}, expected /metrics")
            auth = ep.get("authorization", {})
            cred = auth.get("credentials", {})
            if auth.get("type", "Bearer") != "Bearer" or (cred.get("name"), cred.get("key")) != (
                token_ref.get("name"), token_ref.get("key")):
                problem(monitor, f"authorization must be Bearer from the gateway's {METRICS_KEY} Secret")

    rules = checker.of_kind("PrometheusRule")
    if len(rules) != 1:
        problems.append(f"ERROR [{name}]: expected one PrometheusRule, found {len(rules)}")
    for rule in rules:
        problems += groups_problems(rule.get("spec", {}).get("groups"), f"[{name}] PrometheusRule/{rule['metadata']['name']}")

    dashboards = [c for c in checker.of_kind("ConfigMap")
                  if c["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if [c["metadata"]["name"] for c in dashboards] != [DASHBOARD_CONFIGMAP]:
        problems.append(f"ERROR [{name}]: expected one ConfigMap {DASHBOARD_CONFIGMAP} labelled grafana_dashboard: \"1\" "
                        f"(no hash suffix), found {[c['metadata']['name'] for c in dashboards]}")
    for cm in dashboards:
        data = cm.get("data", {})
        jsons = [k for k in data if k.endswith(".json")]
        if len(jsons) != 1 or json.loads(data[jsons[0]]) != load_dashboard():
            problem(cm, "must hold dashboard.json, as one *.json key")
    return problems


def main(argv):
    commands = {
        "sync": (0, sync),
        "drift": (0, drift),
        "dashboard": (0, dashboard),
        "dashboard-rules": (1, dashboard_rules),
        "manifests": (3, manifests),
    }
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 != commands[argv[1]][0]:
        print(__doc__, file=sys.stderr)
        return 2
    problems = commands[argv[1]][1](*argv[2:])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
