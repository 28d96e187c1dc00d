{{/*
Shared names and labels. The selector labels stay fixed across upgrades
(a Deployment's selector cannot change); everything else may.
*/}}

{{- define "qm.serviceName" -}}
{{- default .Values.name .Values.service.name -}}
{{- end -}}

{{- define "qm.selectorLabels" -}}
app.kubernetes.io/name: {{ .Values.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "qm.labels" -}}
{{ include "qm.selectorLabels" . }}
app.kubernetes.io/part-of: quartermaster
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "qm.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* The chart makes its own CA when cert-manager is on without an issuerRef. */}}
{{- define "qm.ownCA" -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) -}}true{{- end -}}
{{- end -}}

{{- define "qm.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}{{ .Values.name }}-tls{{- else -}}{{ .Values.tls.secretName }}{{- end -}}
{{- end -}}

{{- define "qm.loadClientSecret" -}}
{{- if include "qm.ownCA" . -}}{{ .Values.name }}-load-client{{- else -}}{{ .Values.loadgen.clientSecretName }}{{- end -}}
{{- end -}}

{{/* The Service's in-cluster DNS name, which the server certificate holds. */}}
{{- define "qm.serviceHost" -}}
{{ include "qm.serviceName" . }}.{{ .Release.Namespace }}.svc
{{- end -}}
