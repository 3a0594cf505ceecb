{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "mrtr-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "mrtr-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mrtr-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mrtr-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mrtr-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mrtr-gateway.labels" -}}
helm.sh/chart: {{ include "mrtr-gateway.chart" . }}
{{ include "mrtr-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mrtr-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mrtr-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mrtr-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The key ring Secret in use: the existing one, or the generated one; empty when none. */}}
{{- define "mrtr-gateway.keySecretName" -}}
{{- if .Values.keyRing.existingSecret }}
{{- .Values.keyRing.existingSecret }}
{{- else if .Values.keyRing.create }}
{{- printf "%s-keys" (include "mrtr-gateway.fullname" .) }}
{{- end }}
{{- end }}

{{- define "mrtr-gateway.keySecretKey" -}}
{{- if .Values.keyRing.existingSecret }}
{{- .Values.keyRing.existingSecretKey }}
{{- else }}
{{- "keys" }}
{{- end }}
{{- end }}

{{- define "mrtr-gateway.keysFile" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.keyRing.mountPath) (include "mrtr-gateway.keySecretKey" .) }}
{{- end }}

{{/* A TOML key: bare when possible, quoted otherwise. */}}
{{- define "mrtr-gateway.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}
{{- . }}
{{- else }}
{{- toJson . }}
{{- end }}
{{- end }}

{{/*
A TOML value on one line. Strings, numbers and booleans are written as JSON writes them (valid
TOML); lists become arrays and maps inline tables.
*/}}
{{- define "mrtr-gateway.tomlValue" -}}
{{- if kindIs "map" . }}
{{- $map := . }}
{{- $parts := list }}
{{- $order := keys $map | sortAlpha }}
{{- if has "mode" $order }}
{{- $order = prepend (without $order "mode") "mode" }}
{{- end }}
{{- range $key := $order }}
{{- $parts = append $parts (printf "%s = %s" (include "mrtr-gateway.tomlKey" $key) (include "mrtr-gateway.tomlValue" (index $map $key))) }}
{{- end }}
{{- if $parts }}{ {{ join ", " $parts }} }{{ else }}{}{{ end }}
{{- else if kindIs "slice" . }}
{{- $parts := list }}
{{- range . }}
{{- $parts = append $parts (include "mrtr-gateway.tomlValue" .) }}
{{- end }}
{{- printf "[%s]" (join ", " $parts) }}
{{- else if kindIs "invalid" . }}
{{- fail "config: a null value cannot be written to TOML; leave the key out instead" }}
{{- else if and (kindIs "float64" .) (eq . (floor .)) }}
{{- int64 . }}
{{- else }}
{{- toJson . }}
{{- end }}
{{- end }}

{{/*
The body of a TOML table: one "key = value" line per entry of .table, the keys of .first first,
then the others in order, leaving out those in .skip.
*/}}
{{- define "mrtr-gateway.tomlBody" -}}
{{- $table := .table }}
{{- $skip := .skip | default list }}
{{- $order := list }}
{{- range .first }}
{{- if hasKey $table . }}
{{- $order = append $order . }}
{{- end }}
{{- end }}
{{- range $key := keys $table | sortAlpha }}
{{- if not (has $key $order) }}
{{- $order = append $order $key }}
{{- end }}
{{- end }}
{{- range $key := $order }}
{{- if not (has $key $skip) }}
{{ include "mrtr-gateway.tomlKey" $key }} = {{ include "mrtr-gateway.tomlValue" (index $table $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Render-time checks of values that the schema cannot express. */}}
{{- define "mrtr-gateway.validate" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $needed := add (int .Values.preStopSleepSeconds) (int .Values.drainTimeoutSeconds) }}
{{- if le $grace $needed }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than preStopSleepSeconds + drainTimeoutSeconds (%d)" $grace $needed) }}
{{- end }}
{{- $backends := .Values.config.backend | default dict }}
{{- range $i, $route := .Values.config.route }}
{{- if not (hasKey $backends $route.backend) }}
{{- fail (printf "config.route[%d].backend: no config.backend.%s is defined" $i $route.backend) }}
{{- end }}
{{- if not (and $route.auth $route.auth.mode) }}
{{- fail (printf "config.route[%d].auth: required (mode none, bearer or jwt)" $i) }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when some route is declared without authentication. */}}
{{- define "mrtr-gateway.unauthenticated" -}}
{{- range .Values.config.route }}
{{- if eq .auth.mode "none" }}true{{ end }}
{{- end }}
{{- end }}

{{/*
The gateway's configuration file. Backends that no route names are left out (so that replacing
config.route also retires the default demo backend), and server.allow_unauthenticated is set
exactly when a route declares auth mode none.
*/}}
{{- define "mrtr-gateway.configToml" -}}
{{- $config := .Values.config }}
{{- $server := merge (dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.mcp)) "admin_listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) "drain_timeout" (printf "%ds" (int .Values.drainTimeoutSeconds))) (deepCopy ($config.server | default dict)) }}
{{- if include "mrtr-gateway.unauthenticated" . }}
{{- $_ := set $server "allow_unauthenticated" true }}
{{- end }}
{{- $used := list }}
{{- range $config.route }}
{{- $used = append $used .backend }}
{{- end -}}
# Rendered by the mrtr-gateway Helm chart from the release's values (config, ports,
# drainTimeoutSeconds, keyRing).
[server]
{{- include "mrtr-gateway.tomlBody" (dict "table" $server "first" (list "listen" "admin_listen" "drain_timeout")) }}
{{- range $route := $config.route }}

[[route]]
{{- include "mrtr-gateway.tomlBody" (dict "table" $route "first" (list "path" "backend")) }}
{{- end }}
{{- range $name := keys $config.backend | sortAlpha }}
{{- if has $name $used }}
{{- $backend := index $config.backend $name }}

[backend.{{ include "mrtr-gateway.tomlKey" $name }}]
{{- include "mrtr-gateway.tomlBody" (dict "table" $backend "first" (list "transport" "command" "args" "url") "skip" (list "pool")) }}
{{- if $backend.pool }}

[backend.{{ include "mrtr-gateway.tomlKey" $name }}.pool]
{{- include "mrtr-gateway.tomlBody" (dict "table" $backend.pool) }}
{{- end }}
{{- end }}
{{- end }}
{{- $mrtr := deepCopy ($config.mrtr | default dict) }}
{{- if include "mrtr-gateway.keySecretName" . }}
{{- $_ := set $mrtr "keys_file" (include "mrtr-gateway.keysFile" .) }}
{{- end }}
{{- if $mrtr }}

[mrtr]
{{- include "mrtr-gateway.tomlBody" (dict "table" $mrtr "first" (list "keys_file")) }}
{{- end }}
{{- end }}
