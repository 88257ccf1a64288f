"""Metric names used by PromQL expressions, and the expressions of the deployment files.

Used by check_metrics.py and check_dashboard.py (tests/deploy). Needs PyYAML: run with
/usr/bin/python3 (Debian's python3-yaml).
"""

import json
import re

import yaml

# Grafana's built-in interval variables become a duration; other variables sit inside label
# matchers or legends and become a plain word.
_GRAFANA_INTERVAL = re.compile(r"\$__(?:rate_interval|interval|range)\b"
                               r"|\$\{__(?:rate_interval|interval|range)\}")
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]\w*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_TOKEN = re.compile(
    r"(?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?:ms|[smhdwy])?)"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan", "atan2"}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*[,{]")


def substitute_grafana_variables(expr):
    """`expr` with Grafana's $variables replaced so that it is plain PromQL."""
    return _GRAFANA_VAR.sub("x", _GRAFANA_INTERVAL.sub("5m", expr))


def metric_names(expr):
    """The set of metric names a PromQL expression selects (functions and keywords excluded)."""
    text = substitute_grafana_variables(expr)
    text = _STRING.sub('""', text)
    text = _BRACES.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    names = set()
    for match in _TOKEN.finditer(text):
        ident = match.group("ident")
        if ident is None or match.group("call") or ident.lower() in _KEYWORDS:
            continue
        names.add(ident)
    return names


def template_query_names(query):
    """Metric names in a Grafana template query: label_values(metric, label) or plain PromQL."""
    match = _LABEL_VALUES.match(query)
    if match:
        return {match.group(1)}
    if query.strip().startswith("label_values("):
        return set()  # label_values(label): no metric
    return metric_names(query)


def dashboard_expressions(path):
    """[(where, expr, kind)] of a dashboard JSON: kind 'promql' for panel targets, 'template'
    for templating queries."""
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    found = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((f"panel '{panel.get('title')}' {target.get('refId')}",
                                  target["expr"], "promql"))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and query:
            found.append((f"variable '{var.get('name')}'", query, "template"))
    return found


def rule_expressions(path):
    """[(where, expr)] of a Prometheus rules file."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    found = []
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            found.append((f"rule '{name}'", rule["expr"]))
    return found
