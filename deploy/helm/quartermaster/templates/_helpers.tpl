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

{{/*
The namespaces Create makes servers in (templates.enabled), as a JSON list:
templates.namespaces, else each template's namespace in templates.content
("default" when it names none, as qm serve does). It also refuses, naming
the value, the settings that would deploy a Create that cannot work.
*/}}
{{- define "qm.templateNamespaces" -}}
{{- $t := .Values.templates -}}
{{- if and (not $t.content) (not $t.existingConfigMap) -}}
{{- fail "templates.enabled: give the templates in templates.content, or a ConfigMap of yours in templates.existingConfigMap" -}}
{{- end -}}
{{- if and $t.content $t.existingConfigMap -}}
{{- fail "templates: give templates.content or templates.existingConfigMap, not both (the ConfigMap would win and content be ignored)" -}}
{{- end -}}
{{- $ns := list -}}
{{- range $t.content -}}
{{- $ns = append $ns (default "default" .namespace) -}}
{{- if and .fleet (not $t.fleets) -}}
{{- fail (printf "templates.content: template %q reads Fleet %q, which templates.fleets=false does not allow" .name .fleet) -}}
{{- end -}}
{{- end -}}
{{- if $t.namespaces -}}
{{- range $ns -}}
{{- if not (has . $t.namespaces) -}}
{{- fail (printf "templates.namespaces: a template in templates.content makes servers in %q, which is not among them" .) -}}
{{- end -}}
{{- end -}}
{{- $ns = $t.namespaces -}}
{{- else if $t.existingConfigMap -}}
{{- fail "templates.existingConfigMap: also list the namespaces its templates make servers in as templates.namespaces (the chart cannot read your ConfigMap)" -}}
{{- end -}}
{{- with .Values.watchNamespace -}}
{{- range $ns -}}
{{- if ne . $.Values.watchNamespace -}}
{{- fail (printf "templates: namespace %q is not watchNamespace %q; the allocator would never see a server it made there become Ready" . $.Values.watchNamespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $ns | uniq | sortAlpha | toJson -}}
{{- end -}}
