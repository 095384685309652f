{{/* Chart name, at most 63 characters. */}}
{{- define "rollguard.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the release's objects: the release name when it already holds the chart name
(`helm install rollguard` gives "rollguard"), else "<release>-rollguard". Suffixes such
as "-webhook" or "-leader-election" are added to it, so it stays at 40 characters.
*/}}
{{- define "rollguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "rollguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rollguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rollguard.labels" -}}
{{ include "rollguard.selectorLabels" . }}
app.kubernetes.io/part-of: rollguard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "rollguard.serviceName" -}}
{{ include "rollguard.fullname" . }}-webhook
{{- end }}

{{/* Secret that cert-manager writes the serving certificate into. */}}
{{- define "rollguard.certSecretName" -}}
{{ include "rollguard.fullname" . }}-webhook-cert
{{- end }}

{{/* rollguard keeps the caBundle only of a webhook it deploys and certifies itself. */}}
{{- define "rollguard.injectsCA" -}}
{{- if and .Values.webhook.enabled (not .Values.tls.certManager.enabled) }}true{{ end }}
{{- end }}

{{/* repository@digest when a digest is given, else repository:tag (the appVersion by default). */}}
{{- define "rollguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* rbac.scope is cluster, or namespaces with a list of them. */}}
{{- define "rollguard.checkScope" -}}
{{- if not (has .Values.rbac.scope (list "cluster" "namespaces")) }}
{{- fail (printf "rbac.scope must be cluster or namespaces, not %q" .Values.rbac.scope) }}
{{- end }}
{{- if and (eq .Values.rbac.scope "namespaces") (empty .Values.rbac.namespaces) }}
{{- fail "rbac.scope=namespaces needs rbac.namespaces, the namespaces to watch" }}
{{- end }}
{{- end }}
