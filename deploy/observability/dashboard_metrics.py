#!/usr/bin/env python3
"""Prints every metric family the dashboard and the alert rules query, one per line.

    dashboard_metrics.py [FILE ...]

FILEs are Grafana dashboards (`.json`) and Prometheus rules files (`.yml`/`.yaml`);
without any, this directory's dashboard.json and alerts.rules.yml. The names come from
every PromQL expression in them: the panels' targets, the template variables'
queries (`label_values(<selector>, <label>)`, `query_result(<expr>)`) and the rules'
`expr`. Histogram sample suffixes are stripped (`_bucket`, `_count`, `_sum`: the
family is named without them); counters' `_total` is kept as written. Functions,
aggregations, keywords, label names (matchers and `by`/`without`/`on`/`ignoring`/
`group_left`/`group_right` lists), strings, numbers, durations and Grafana variables
are not names; nor are the rules' own `record:` names.

A test that scrapes a running gateway checks that each name appears in its exposition
(tests/e2e). Needs only the standard library (PyYAML is used when installed; otherwise
the rules' `expr:` scalars are read line by line, which suffices for these files).
`import dashboard_metrics` gives `expressions(path)` and `metric_names(expr)`.
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FILES = [os.path.join(HERE, "dashboard.json"), os.path.join(HERE, "alerts.rules.yml")]

HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
# PromQL words that are not metric names where they can stand without a "(" after them.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "atan2", "inf", "nan", "start", "end",
}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.I)
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
COMMENT = re.compile(r"#[^\n]*")
TOKEN = re.compile(
    r"(?P<var>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])"  # Grafana variables
    r"|(?P<num>(?:0x[0-9a-fA-F]+|\d[\w.]*|\.\d[\w.]*))"  # numbers, durations (5m, 1e3)
    r"|(?P<id>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<other>\S)"
)


def _strip_blocks(expr, open_char, close_char):
    """Removes every `open ... close` block (not nested in PromQL: matchers, ranges)."""
    out, depth = [], 0
    for ch in expr:
        if ch == open_char:
            depth += 1
        elif ch == close_char and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def metric_names(expr):
    """The metric names an expression selects, as written (suffixes kept)."""
    expr = STRING.sub('""', expr)
    expr = COMMENT.sub("", expr)
    expr = _strip_blocks(expr, "{", "}")  # label matchers
    expr = _strip_blocks(expr, "[", "]")  # ranges and subqueries
    expr = GROUPING.sub(" ", expr)
    names = []
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr)]
    for i, (kind, text) in enumerate(tokens):
        if kind != "id" or text.lower() in KEYWORDS:
            continue
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if nxt == "(":  # a function or an aggregation
            continue
        prev = tokens[i - 1][1] if i else ""
        if prev == "@":  # `@ start()` / `@ end()`
            continue
        names.append(text)
    return names


def family(name):
    """A sample name's metric family: histogram suffixes stripped, `_total` kept."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _split_top_level(args):
    """Splits `a, b` at the commas outside parentheses, braces and strings."""
    parts, depth, current = [], 0, []
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[(){}\[\],]|[^"\'(){}\[\],]+', args):
        tok = m.group()
        if tok in "({[":
            depth += 1
        elif tok in ")}]":
            depth -= 1
        if tok == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(tok)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def variable_expression(query):
    """The PromQL in a Grafana Prometheus variable query, or None (`label_values(job)`,
    `label_names()`, `metrics(re)` select no metric)."""
    query = query.strip()
    m = re.fullmatch(r"(label_values|query_result)\s*\((.*)\)", query, re.S)
    if not m:
        return None
    func, inner = m.groups()
    if func == "query_result":
        return inner
    args = _split_top_level(inner)
    return args[0] if len(args) == 2 else None


def _dashboard_expressions(dashboard):
    exprs = []

    def panels(items):
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))  # collapsed rows

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                exprs.append(target["expr"])
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        expr = variable_expression(query or var.get("definition", ""))
        if expr:
            exprs.append(expr)
    return exprs


def _rules_with_yaml(text):
    import yaml

    doc = yaml.safe_load(text) or {}
    groups = doc.get("groups") or doc.get("spec", {}).get("groups") or []
    exprs, records = [], set()
    for group in groups:
        for rule in group.get("rules", []):
            exprs.append(str(rule["expr"]))
            if "record" in rule:
                records.add(rule["record"])
    return exprs, records


def _rules_line_by_line(text):
    """`expr:` and `record:` scalars without PyYAML: inline, or a block (`|`, `>`)."""
    exprs, records = [], set()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:-\s+)?(expr|record):\s*(.*?)\s*$", lines[i])
        i += 1
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2), m.group(3)
        if value[:1] in ("|", ">"):
            block = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            value = "\n".join(block)
        elif value[:1] in ("'", '"'):
            value = value[1:-1]
        if key == "expr":
            exprs.append(value)
        else:
            records.add(value)
    return exprs, records


def expressions(path):
    """(PromQL expressions, recording-rule names) of a dashboard or a rules file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return _dashboard_expressions(json.loads(text)), set()
    try:
        return _rules_with_yaml(text)
    except ImportError:
        return _rules_line_by_line(text)


def families(paths):
    exprs, records = [], set()
    for path in paths:
        e, r = expressions(path)
        exprs += e
        records |= r
    return sorted({family(n) for expr in exprs for n in metric_names(expr) if n not in records})


def main(argv):
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    names = families(argv[1:] or DEFAULT_FILES)
    if not names:
        print("no metric names found", file=sys.stderr)
        return 1
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
