{{/* Chart name. */}}
{{- define "commwatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "commwatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "commwatch.collectorName" -}}{{ include "commwatch.fullname" . }}-collector{{- end -}}
{{- define "commwatch.agentName" -}}{{ include "commwatch.fullname" . }}-agent{{- end -}}
{{- define "commwatch.configName" -}}{{ include "commwatch.fullname" . }}-config{{- end -}}

{{/* Labels of every object. */}}
{{- define "commwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "commwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: commwatch
{{- end -}}

{{/* Selector labels of one component: include "commwatch.selectorLabels" (list . "agent") */}}
{{- define "commwatch.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "commwatch.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "commwatch.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The collector URL agents stream to; with collector.replicas > 1, the headless Service's name to resolve
     (agent.collectorDiscovery=dns) or every shard's URL, comma-separated (list). */}}
{{- define "commwatch.collectorURL" -}}
{{- if .Values.agent.collectorURL -}}
{{ .Values.agent.collectorURL }}
{{- else if and (gt (int .Values.collector.replicas) 1) (eq .Values.agent.collectorDiscovery "dns") -}}
dns+{{ ternary "http" "https" (eq .Values.tls.mode "off") }}://{{ include "commwatch.collectorName" . }}-headless.{{ .Release.Namespace }}.svc:{{ .Values.collector.grpcPort }}
{{- else if gt (int .Values.collector.replicas) 1 -}}
{{- $scheme := ternary "http" "https" (eq .Values.tls.mode "off") -}}
{{- $name := include "commwatch.collectorName" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.collector.replicas) -}}
{{- $urls = append $urls (printf "%s://%s-%d.%s-headless.%s.svc:%v" $scheme $name $i $name $.Release.Namespace $.Values.collector.grpcPort) -}}
{{- end -}}
{{ join "," $urls }}
{{- else -}}
{{ ternary "http" "https" (eq .Values.tls.mode "off") }}://{{ include "commwatch.collectorName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.collector.grpcPort }}
{{- end -}}
{{- end -}}

{{/* Container security context without capabilities (the collector; the agent without process environment). */}}
{{- define "commwatch.restrictedSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
Fails the render early when the TLS Secret the pods mount is not there (a pod would otherwise wait in
ContainerCreating). Where the render can see the cluster (helm install, helm upgrade), the Secret must exist in
the release's namespace; where it cannot (helm template, helm lint, a client-side dry run), tls.secretCreated
must say it will. cert-manager issues it (tls.certManager.enabled); tls.mode=off mounts none.
*/}}
{{- define "commwatch.checkTlsSecret" -}}
{{- if and (ne .Values.tls.mode "off") (not .Values.tls.certManager.enabled) -}}
{{- $create := "create it first (README, \"Kubernetes and Helm\": ca.crt, tls.crt, tls.key), or let cert-manager issue it (tls.certManager.enabled=true), or stream in plain text (tls.mode=off)" -}}
{{- if lookup "v1" "Namespace" "" .Release.Namespace -}}
{{- if not (lookup "v1" "Secret" .Release.Namespace .Values.tls.secretName) -}}
{{- fail (printf "tls.mode=%s mounts the Secret %q, which namespace %q does not have: %s" .Values.tls.mode .Values.tls.secretName .Release.Namespace $create) -}}
{{- end -}}
{{- else if not .Values.tls.secretCreated -}}
{{- fail (printf "tls.mode=%s mounts the Secret %q, and this render cannot see the cluster to check it: %s; when it is created by other means, set tls.secretCreated=true" .Values.tls.mode .Values.tls.secretName $create) -}}
{{- end -}}
{{- end -}}
{{- end -}}
