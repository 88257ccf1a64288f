#!/usr/bin/python3
"""Checks the Grafana dashboard: valid JSON, every panel and variable bound to the data source
variable ${DS_PROMETHEUS} (a Prometheus data source chosen where the dashboard is imported;
the provisioned default in the compose stack), unique panel ids, every topic of the deployment issue shown, and every PromQL
expression accepted by `promtool check rules` (Grafana variables substituted).
Exit 0 = all good, 1 = a problem (each printed). Run with /usr/bin/python3.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql_names  # noqa: E402

# Each topic the dashboard must show, as the metric (sample) name that shows it.
REQUIRED = {
    "requests/s by kernel and code": "kernelserve_requests_total",
    "latency p50/p99": "kernelserve_request_duration_seconds_bucket",
    "kernel time by platform": "kernelserve_kernel_duration_seconds_bucket",
    "config source mix": "kernelserve_config_selections_total",
    "autotune runs": "kernelserve_autotune_runs_total",
    "queue depth": "kernelserve_queue_depth",
    "device memory": "kernelserve_device_memory_used_bytes",
    "store errors": "kernelserve_store_errors_total",
    "queue wait": "kernelserve_queue_wait_seconds_bucket",
    "calls by identity": "kernelserve_identity_requests_total",
    "quota refusals": "kernelserve_quota_refusals_total",
    "resident bytes": "kernelserve_resident_bytes",
    "resident creates and refusals": "kernelserve_resident_refusals_total",
}

DATASOURCE = "${DS_PROMETHEUS}"


def check_datasource_variable(dashboard, provisioning, errors):
    """A datasource variable DS_PROMETHEUS of type prometheus, and a default Prometheus data
    source provisioned for it to pick in the compose stack."""
    variables = dashboard.get("templating", {}).get("list", [])
    found = [v for v in variables if v.get("name") == "DS_PROMETHEUS"]
    if not found or found[0].get("type") != "datasource" or found[0].get("query") != "prometheus":
        errors.append("templating: needs a variable DS_PROMETHEUS of type datasource, query "
                      f"prometheus; got {found!r}")
    for v in variables:
        ds = v.get("datasource")
        if v.get("type") == "query" and (not isinstance(ds, dict) or ds.get("uid") != DATASOURCE):
            errors.append(f"variable '{v.get('name')}': data source {ds!r}; expected {DATASOURCE}")
    with open(provisioning, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not any(d.get("type") == "prometheus" and d.get("isDefault")
               for d in doc.get("datasources", [])):
        errors.append(f"{provisioning}: no default Prometheus data source for DS_PROMETHEUS")


def check_panels(dashboard, errors):
    ids = []

    def walk(panels):
        for panel in panels:
            ids.append(panel.get("id"))
            if "gridPos" not in panel:
                errors.append(f"panel '{panel.get('title')}': no gridPos")
            if panel.get("type") != "row":
                if not panel.get("targets"):
                    errors.append(f"panel '{panel.get('title')}': no targets")
                sources = [panel.get("datasource")] + [t.get("datasource") for t in
                                                       panel.get("targets", [])]
                for ds in sources:
                    if not isinstance(ds, dict) or ds.get("uid") != DATASOURCE:
                        errors.append(f"panel '{panel.get('title')}': data source {ds!r}; "
                                      f"expected uid {DATASOURCE}")
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    if len(ids) != len(set(ids)) or None in ids:
        errors.append(f"panel ids must be present and unique, got {ids}")
    if not dashboard.get("uid") or not dashboard.get("title"):
        errors.append("dashboard needs a uid and a title")


def check_promql_syntax(expressions, errors):
    """Feeds every expression to promtool as a recording rule."""
    rules = [{"record": f"dashboard:expr{i}", "expr": promql_names.substitute_grafana_variables(e)}
             for i, (_, e, kind) in enumerate(expressions) if kind == "promql"]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        path = f.name
    try:
        result = subprocess.run(["promtool", "check", "rules", path], capture_output=True,
                                text=True)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        errors.append("promtool rejects a dashboard expression:\n" + result.stdout + result.stderr)
    return len(rules)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--datasources", required=True, help="Grafana datasource provisioning")
    args = parser.parse_args()
    errors = []
    with open(args.dashboard, encoding="utf-8") as f:
        dashboard = json.load(f)
    check_datasource_variable(dashboard, args.datasources, errors)
    check_panels(dashboard, errors)
    expressions = promql_names.dashboard_expressions(args.dashboard)
    used = set()
    for _, expr, kind in expressions:
        used |= (promql_names.template_query_names(expr) if kind == "template"
                 else promql_names.metric_names(expr))
    for topic, name in REQUIRED.items():
        if name not in used:
            errors.append(f"topic '{topic}': no expression uses {name}")
    checked = check_promql_syntax(expressions, errors)
    print(f"{len(expressions)} expressions ({checked} PromQL checked by promtool), "
          f"{len(REQUIRED)} topics required")
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print("OK: dashboard valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
