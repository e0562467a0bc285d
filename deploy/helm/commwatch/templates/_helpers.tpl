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
