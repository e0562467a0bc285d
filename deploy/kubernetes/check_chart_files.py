#!/usr/bin/env python3
"""Checks that the Helm chart ships the repository's dashboards and rules unchanged.

usage: check_chart_files.py --values VALUES.yaml --repo DIR --rules-out FILE RENDERED.yaml

RENDERED is `helm template` with VALUES (grafanaDashboards and prometheusRule enabled). Every dashboards/*.json
must be in one ConfigMap carrying the sidecar's label, parsed equal to the file; the PrometheusRule's groups must
equal those of deploy/prometheus/rules/*.yml (in file order) once the runbook URL, the Grafana URL and the
collector's scrape job are replaced by the values' (what the template replaces). The rendered groups are written
to --rules-out as a rules file, for promtool.
"""

import argparse
import json
import pathlib
import sys

import yaml

RUNBOOK = "https://github.com/example/commwatch/blob/main/docs/runbooks.md"
GRAFANA = "https://grafana.example.com/"
COLLECTOR_JOB = 'job="commwatch-collector"'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--values", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--rules-out", required=True)
    ap.add_argument("rendered")
    args = ap.parse_args()
    repo = pathlib.Path(args.repo)
    values = yaml.safe_load(open(args.values, encoding="utf-8"))
    docs = [d for d in yaml.safe_load_all(open(args.rendered, encoding="utf-8")) if d]
    errors = []

    dash = values["grafanaDashboards"]
    label, value = dash.get("label", "grafana_dashboard"), dash.get("labelValue", "1")
    shipped = {}
    for d in docs:
        if d["kind"] == "ConfigMap" and d["metadata"].get("labels", {}).get(label) == value:
            for key, text in d["data"].items():
                shipped[key] = json.loads(text)
    for f in sorted((repo / "dashboards").glob("*.json")):
        if f.name not in shipped:
            errors.append(f"dashboard {f.name}: in no ConfigMap labelled {label}={value}")
        elif shipped[f.name] != json.load(open(f, encoding="utf-8")):
            errors.append(f"dashboard {f.name}: the ConfigMap's copy differs from the file")
    if set(shipped) - {f.name for f in (repo / "dashboards").glob("*.json")}:
        errors.append(f"ConfigMaps with dashboards that are not in dashboards/: {sorted(shipped)}")

    rule = values["prometheusRule"]
    job = rule.get("collectorJob") or "commwatch-collector"
    expected = []
    for f in sorted((repo / "deploy/prometheus/rules").glob("*.yml")):
        text = open(f, encoding="utf-8").read()
        text = text.replace(RUNBOOK, rule["runbookURL"])
        text = text.replace(GRAFANA, rule["grafanaURL"].rstrip("/") + "/")
        text = text.replace(COLLECTOR_JOB, f"job={json.dumps(job)}")
        expected.extend(yaml.safe_load(text)["groups"])
    rendered = [d for d in docs if d["kind"] == "PrometheusRule"]
    if len(rendered) != 1:
        errors.append(f"{len(rendered)} PrometheusRule objects rendered, expected 1")
    else:
        groups = rendered[0]["spec"]["groups"]
        if groups != expected:
            errors.append("the PrometheusRule's groups differ from deploy/prometheus/rules/*.yml")
        with open(args.rules_out, "w", encoding="utf-8") as out:
            yaml.safe_dump({"groups": groups}, out, sort_keys=False)
        urls = [r["annotations"].get(k, "") for g in groups for r in g["rules"] if "alert" in r
                for k in ("runbook_url", "dashboard_url")]
        foreign = [u for u in urls if not u.startswith((rule["runbookURL"], rule["grafanaURL"].rstrip("/")))]
        if foreign or not urls:
            errors.append(f"alert links outside the configured URLs: {foreign[:3]}")

    for e in errors:
        print(f"FAIL {e}")
    print(f"{len(shipped)} dashboards and {len(expected)} rule groups compared with the repository, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
