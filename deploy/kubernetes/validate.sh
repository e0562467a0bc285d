#!/usr/bin/env bash
# Validates the Kubernetes deployment: the plain manifests in deploy/kubernetes/ and the Helm chart
# deploy/helm/commwatch/ rendered with its default values and every ci/*-values.yaml (TLS off, TLS with a token,
# mutual TLS with cert-manager and monitors, agent-only, collector-only, dashboards and rules).
#
#   deploy/kubernetes/validate.sh [PATH/TO/commwatch]
#
# Every resource is checked against the Kubernetes schemas (PyPI kubernetes-validate, strict; a kind without a
# schema is an error), the custom resources (ServiceMonitor, PodMonitor, PrometheusRule, Certificate) against
# hand-written schemas, and the references between resources (check_manifests.py). The chart's dashboards
# ConfigMaps and PrometheusRule must hold the repository's dashboards and rules (check_chart_files.py). `helm
# lint` runs on every values set and an invalid value must be refused by values.schema.json. Given the binary,
# the configuration files the manifests and chart ship are parsed by it. Exits non-zero on any error.
#
# Tools: python3 with kubernetes-validate; helm 3 ($COMMWATCH_HELM or PATH); kubectl for `kubectl kustomize`
# ($COMMWATCH_KUBECTL or PATH; skipped with a note when absent). Kubernetes version: $COMMWATCH_K8S_VERSION
# (default 1.30.0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
chart=$(cd "$here/../helm/commwatch" && pwd)
k8s=${COMMWATCH_K8S_VERSION:-1.30.0}
helm=${COMMWATCH_HELM:-helm}
kubectl=${COMMWATCH_KUBECTL:-kubectl}
bin=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAILED: $*"; failed=1; }

if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  echo "FAILED: python3 cannot import kubernetes_validate (pip install kubernetes-validate)"; exit 2
fi
if ! "$helm" version >/dev/null 2>&1; then
  echo "FAILED: helm not found (set COMMWATCH_HELM or put helm on PATH)"; exit 2
fi
echo "kubernetes-validate $(python3 -c 'import kubernetes_validate.version as v; print(v.__version__)'), $("$helm" version --short), schemas of Kubernetes $k8s"

# check NAME FILE... : schema and reference checks; the config files go to $work/NAME/ for check_configs.
check() {
  local name=$1; shift
  mkdir -p "$work/$name"
  echo "== $name"
  python3 "$here/check_manifests.py" --k8s-version "$k8s" --toml-out "$work/$name" \
    --external PersistentVolumeClaim/commwatch-state "$@" || fail "$name: manifest checks"
  check_configs "$name"
}

# The shipped agent.toml/collector.toml parse with the real binary (when given).
check_configs() {
  local d=$work/$1
  [ -n "$bin" ] || return 0
  mkdir -p "$d/empty"
  if [ -f "$d/agent.toml" ]; then
    if "$bin" agent --config "$d/agent.toml" --once --sysfs-root "$d/empty" --procfs-root "$d/empty" \
        --node validate --steps-socket off --steps-udp off >/dev/null 2>"$d/agent.err"; then
      echo "ok   agent.toml parses"
    else
      cat "$d/agent.err"; fail "$1: agent.toml"
    fi
  fi
  if [ -f "$d/collector.toml" ]; then
    # The same file was already run (the collector runs until the timeout when its config is good).
    local sum rc=0
    sum=$(sha256sum <"$d/collector.toml" | cut -c1-16)
    if [ -e "$work/collector-ok-$sum" ]; then echo "ok   collector.toml parses (as before)"; return 0; fi
    timeout 2 "$bin" collector --config "$d/collector.toml" --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
      >/dev/null 2>"$d/collector.err" || rc=$?
    if [ "$rc" -eq 124 ]; then
      echo "ok   collector.toml parses (the collector ran)"
      touch "$work/collector-ok-$sum"
    else
      cat "$d/collector.err"; fail "$1: collector.toml (exit $rc)"
    fi
  fi
}

# 1. Plain manifests, file by file, and as kustomize builds them.
check plain "$here"/*.yaml
if "$kubectl" version --client >/dev/null 2>&1; then
  if "$kubectl" kustomize "$here" >"$work/kustomized.yaml" 2>"$work/kustomize.err"; then
    check kustomize "$work/kustomized.yaml"
  else
    cat "$work/kustomize.err"; fail "kubectl kustomize"
  fi
else
  echo "NOTE: kubectl not found: the kustomize build is not checked (the files were, one by one)"
fi

# 2. The Helm chart: lint and render with each values set. Renders cannot see a cluster here, so they say the
#    TLS Secret exists (tls.secretCreated); 5. checks the render fails without it.
secret=(--set tls.secretCreated=true)
for values in default "$chart"/ci/*-values.yaml; do
  name=helm-$(basename "$values" -values.yaml)
  vals=("${secret[@]}")
  [ "$values" = default ] || vals+=(-f "$values")
  if ! "$helm" lint "$chart" "${vals[@]}" >"$work/lint.out" 2>&1; then
    cat "$work/lint.out"; fail "$name: helm lint"; continue
  fi
  if ! "$helm" template commwatch "$chart" --namespace commwatch --kube-version "$k8s" "${vals[@]}" >"$work/$name.yaml" 2>"$work/template.err"; then
    cat "$work/template.err"; fail "$name: helm template"; continue
  fi
  check "$name" "$work/$name.yaml"
done

# 3. The chart's optional dashboards ConfigMaps and PrometheusRule carry the repository's dashboards/ and
#    deploy/prometheus/rules/ (links to the chart's files/, which hold them: helm warns about links inside a
#    chart, and says nothing here) with only the site's URLs and the collector's scrape job replaced; promtool
#    (when installed) accepts the rendered rules.
obs=$chart/ci/observability-values.yaml
echo "== chart files"
if "$helm" template commwatch "$chart" --namespace commwatch --kube-version "$k8s" "${secret[@]}" -f "$obs" \
    >"$work/observability.yaml" 2>"$work/template.err"; then
  python3 "$here/check_chart_files.py" --values "$obs" --repo "$here/../.." --rules-out "$work/rendered-rules.yml" \
    "$work/observability.yaml" || fail "chart files: dashboards or rules differ from the repository's"
  if grep -q 'symbolic link' "$work/template.err"; then
    cat "$work/template.err"; fail "helm template warns about a link inside the chart"
  else
    echo "ok   helm template: no link inside the chart"
  fi
  if command -v promtool >/dev/null; then
    if promtool check rules "$work/rendered-rules.yml" >"$work/promtool.out" 2>&1; then
      echo "ok   promtool check rules: the PrometheusRule's rules"
    else
      cat "$work/promtool.out"; fail "promtool check rules on the PrometheusRule"
    fi
  else
    echo "NOTE: promtool not found: the PrometheusRule's rules were compared, not checked by promtool"
  fi
else
  cat "$work/template.err"; fail "helm template with $obs"
fi
# By default the chart renders neither.
if ! "$helm" template commwatch "$chart" --kube-version "$k8s" "${secret[@]}" >"$work/default.yaml" 2>"$work/template.err"; then
  cat "$work/template.err"; fail "helm template with the default values"
elif grep -qE 'kind: PrometheusRule|grafana_dashboard' "$work/default.yaml"; then
  fail "the default values render a PrometheusRule or dashboards ConfigMaps (both are off by default)"
else
  echo "ok   default values: no PrometheusRule, no dashboards ConfigMaps"
fi

# 4. values.schema.json refuses what the templates cannot render.
for bad in tls.mode=bogus agent.stepsUDP=anywhere networkPolicy.agentCIDRs[0]=nodes \
    prometheusRule.runbookURL=runbooks.md prometheusRule.grafanaURL=grafana:3000 grafanaDashboards.label=; do
  if "$helm" template commwatch "$chart" --kube-version "$k8s" "${secret[@]}" --set "$bad" >/dev/null 2>"$work/schema.err"; then
    fail "helm template accepted --set $bad"
  elif ! grep -q "values don't meet the specifications of the schema" "$work/schema.err"; then
    cat "$work/schema.err"; fail "helm template refused --set $bad, but not by values.schema.json"
  else
    echo "ok   values.schema.json refuses $bad"
  fi
done

# 5. Without its TLS Secret the chart fails the render at once, saying what to do (a pod would otherwise wait in
#    ContainerCreating); with cert-manager issuing it, or TLS off, nothing is needed.
if "$helm" template commwatch "$chart" --namespace commwatch --kube-version "$k8s" >/dev/null 2>"$work/secret.err"; then
  fail "the chart rendered tls.mode=tls without its Secret"
elif ! grep -q 'mounts the Secret "commwatch-tls".*set tls.secretCreated=true' "$work/secret.err"; then
  cat "$work/secret.err"; fail "the chart failed without its Secret, but not with the message that says what to do"
else
  echo "ok   without its TLS Secret the chart fails early: $(grep -o 'tls.mode=tls mounts[^:]*' "$work/secret.err")"
fi
for set in tls.mode=off "tls.certManager.enabled=true,tls.certManager.issuerRef.name=ca"; do
  if "$helm" template commwatch "$chart" --namespace commwatch --kube-version "$k8s" --set "$set" >/dev/null 2>"$work/secret.err"; then
    echo "ok   $set needs no Secret made by hand"
  else
    cat "$work/secret.err"; fail "the chart refused $set without a Secret made by hand"
  fi
done

if [ "$failed" -ne 0 ]; then
  echo "validate.sh: FAILED"; exit 1
fi
echo "validate.sh: all manifests valid"
