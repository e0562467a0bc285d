#!/usr/bin/env python3
"""Validates Kubernetes manifests: every resource against the Kubernetes OpenAPI schemas (PyPI
`kubernetes-validate`, strict: unknown fields are errors), the custom resources commwatch uses against small
hand-written schemas (kubernetes-validate has none for CRDs), and the references between the resources.

usage: check_manifests.py [--k8s-version 1.30.0] [--toml-out DIR] FILE...   (a FILE of "-" reads stdin)

A resource of a kind with no schema at all is an error, not a warning: a misspelt apiVersion must not pass.
With --toml-out, the commwatch-config ConfigMap's collector.toml/agent.toml are written to DIR so that the
caller can check them with the real binary.
"""

import argparse
import sys

import jsonschema
import kubernetes_validate
import yaml

DURATION = {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"}
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
ENDPOINT_PROPS = {
    "port": {"type": "string"},
    "path": {"type": "string", "pattern": "^/"},
    "scheme": {"enum": ["http", "https"]},
    "interval": DURATION,
    "scrapeTimeout": DURATION,
    "honorLabels": {"type": "boolean"},
    "relabelings": {"type": "array", "items": {"type": "object"}},
    "metricRelabelings": {"type": "array", "items": {"type": "object"}},
}


def crd(spec_props, required):
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": METADATA,
            "spec": {
                "type": "object",
                "required": required,
                "additionalProperties": False,
                "properties": spec_props,
            },
        },
    }


def endpoints(port_key):
    return {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "required": [port_key],
            "additionalProperties": False,
            "properties": ENDPOINT_PROPS,
        },
    }


STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# One rule of a PrometheusRule group: a recording rule or an alert.
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
    "properties": {
        "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "alert": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "expr": {"type": "string", "minLength": 1},
        "for": DURATION,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}

# The subset of the CRDs' fields commwatch writes (monitoring.coreos.com/v1 and cert-manager.io/v1), strict.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): crd(
        {
            "selector": LABEL_SELECTOR,
            "namespaceSelector": {"type": "object"},
            "jobLabel": {"type": "string"},
            "endpoints": endpoints("port"),
        },
        ["selector", "endpoints"],
    ),
    ("monitoring.coreos.com/v1", "PodMonitor"): crd(
        {
            "selector": LABEL_SELECTOR,
            "namespaceSelector": {"type": "object"},
            "jobLabel": {"type": "string"},
            "podMetricsEndpoints": endpoints("port"),
        },
        ["selector", "podMetricsEndpoints"],
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): crd(
        {
            "groups": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["name", "rules"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": DURATION,
                        "rules": {"type": "array", "minItems": 1, "items": PROMETHEUS_RULE},
                    },
                },
            },
        },
        ["groups"],
    ),
    ("cert-manager.io/v1", "Certificate"): crd(
        {
            "secretName": {"type": "string"},
            "commonName": {"type": "string"},
            "dnsNames": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "duration": DURATION,
            "renewBefore": DURATION,
            "usages": {"type": "array", "items": {"type": "string"}},
            "privateKey": {"type": "object"},
            "issuerRef": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                    "group": {"type": "string"},
                },
            },
        },
        ["secretName", "issuerRef", "dnsNames"],
    ),
}

# Objects the manifests reference but do not create: made by the operator (README, "Kubernetes").
EXTERNAL = {("Secret", "commwatch-tls"), ("Secret", "commwatch-token")}


def pod_spec(r):
    spec = r.get("spec", {})
    if r["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
        return spec["template"]["spec"], spec["template"]["metadata"].get("labels", {})
    return None, None


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_references(resources, errors, external):
    """Cross-references that a schema cannot see."""
    names = {(r["kind"], r["metadata"]["name"]) for r in resources} | external
    secret_names = names | EXTERNAL
    pods = []
    for r in resources:
        spec, labels = pod_spec(r)
        if spec is None:
            continue
        where = f"{r['kind']}/{r['metadata']['name']}"
        pods.append((labels, spec))
        sel = r["spec"]["selector"]["matchLabels"]
        if not matches(sel, labels):
            errors.append(f"{where}: selector {sel} does not match the template labels {labels}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        # A StatefulSet's claim templates are volumes of its pods.
        for t in r["spec"].get("volumeClaimTemplates", []):
            volumes.setdefault(t["metadata"]["name"], {})
        sa = spec.get("serviceAccountName")
        if sa and ("ServiceAccount", sa) not in names:
            errors.append(f"{where}: ServiceAccount {sa} is not defined")
        for v in volumes.values():
            if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in names:
                errors.append(f"{where}: ConfigMap {v['configMap']['name']} is not defined")
            if "secret" in v and ("Secret", v["secret"]["secretName"]) not in secret_names:
                errors.append(f"{where}: Secret {v['secret']['secretName']} is neither defined nor documented")
            pvc = v.get("persistentVolumeClaim")
            if pvc and ("PersistentVolumeClaim", pvc["claimName"]) not in names:
                errors.append(f"{where}: PersistentVolumeClaim {pvc['claimName']} is not defined")
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            ports = {p.get("name") for p in c.get("ports", [])}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errors.append(f"{where}: container {c['name']} mounts undefined volume {m['name']}")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    errors.append(f"{where}: {probe} uses port {port!r}, not a port of {c['name']}")

    def selects(selector, what):
        if not any(matches(selector, labels) for labels, _ in pods):
            errors.append(f"{what}: selector {selector} matches no pod template")

    def port_names():
        return {p.get("name") for _, s in pods for c in s.get("containers", []) for p in c.get("ports", [])}

    for r in resources:
        what = f"{r['kind']}/{r['metadata']['name']}"
        if r["kind"] == "Service":
            selects(r["spec"]["selector"], what)
            for p in r["spec"]["ports"]:
                t = p.get("targetPort")
                if isinstance(t, str) and t not in port_names():
                    errors.append(f"{what}: targetPort {t!r} is no container port name")
        elif r["kind"] == "NetworkPolicy":
            selects(r["spec"]["podSelector"]["matchLabels"], what)
        elif r["kind"] == "PodMonitor":
            selects(r["spec"]["selector"]["matchLabels"], what)
        elif r["kind"] == "ServiceMonitor":
            services = [s for s in resources if s["kind"] == "Service"
                        and matches(r["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
            if not services:
                errors.append(f"{what}: selects no Service")
            for e in r["spec"]["endpoints"]:
                if not any(e["port"] == p.get("name") for s in services for p in s["spec"]["ports"]):
                    errors.append(f"{what}: endpoint port {e['port']!r} is no port of the selected Service")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s-version", default="1.30.0")
    ap.add_argument("--toml-out")
    ap.add_argument("--external", action="append", default=[], metavar="KIND/NAME",
                    help="an object the manifests may reference without defining it")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    errors, resources = [], []
    for f in args.files:
        text = sys.stdin.read() if f == "-" else open(f, encoding="utf-8").read()
        try:
            docs = [d for d in yaml.safe_load_all(text) if d]
        except yaml.YAMLError as e:
            errors.append(f"{f}: YAML: {e}")
            continue
        for d in docs:
            what = f"{f}: {d.get('kind')}/{d.get('metadata', {}).get('name')}"
            if d.get("kind") == "Kustomization":
                continue
            key = (d.get("apiVersion"), d.get("kind"))
            try:
                if key in CRD_SCHEMAS:
                    jsonschema.validate(d, CRD_SCHEMAS[key])
                    print(f"ok   {what} (hand schema of the custom resource {key[0]})")
                else:
                    kubernetes_validate.validate(d, args.k8s_version, strict=True)
                    print(f"ok   {what}")
                resources.append(d)
            except kubernetes_validate.SchemaNotFoundError as e:
                errors.append(f"{what}: {e.message}")
            except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
                path = "/".join(str(p) for p in e.absolute_path)
                errors.append(f"{what}: {path}: {e.message}")
    if resources:
        check_references(resources, errors, {tuple(e.split("/", 1)) for e in args.external})
    if args.toml_out:
        for r in resources:
            if r["kind"] == "ConfigMap" and r["metadata"]["name"].endswith("commwatch-config"):
                for k, v in r["data"].items():
                    with open(f"{args.toml_out}/{k}", "w", encoding="utf-8") as out:
                        out.write(v)
    for e in errors:
        print(f"FAIL {e}")
    print(f"{len(resources)} resources checked against Kubernetes {args.k8s_version}, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
