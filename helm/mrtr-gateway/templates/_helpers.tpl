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
{{- toRawJson . }}
{{- end }}
{{- end }}

{{/*
A TOML value on one line. Strings, numbers and booleans are written as JSON writes them (valid
TOML; without escaping <, > and &, so a CEL condition reads as written); lists become arrays and
maps inline tables.
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
{{- toRawJson . }}
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

{{/*
A duration as the gateway reads it (humantime: "250ms", "50s", "2m", "1h 30m"), in milliseconds,
rounded up. Fails on a unit the gateway does not know.
*/}}
{{- define "mrtr-gateway.durationMs" -}}
{{- $perUnit := dict "millis" 1 "msec" 1 "ms" 1 "seconds" 1000 "second" 1000 "secs" 1000 "sec" 1000 "s" 1000 "minutes" 60000 "minute" 60000 "min" 60000 "mins" 60000 "m" 60000 "hours" 3600000 "hour" 3600000 "hr" 3600000 "hrs" 3600000 "h" 3600000 "days" 86400000 "day" 86400000 "d" 86400000 "weeks" 604800000 "week" 604800000 "wk" 604800000 "wks" 604800000 "w" 604800000 "months" 2630016000 "month" 2630016000 "M" 2630016000 "years" 31557600000 "year" 31557600000 "yr" 31557600000 "yrs" 31557600000 "y" 31557600000 }}
{{- $perMs := dict "nanos" 1000000 "nsec" 1000000 "ns" 1000000 "usec" 1000 "us" 1000 "µs" 1000 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+ *[a-zA-Zµ]+" (toString .) -1 }}
{{- $n := regexFind "^[0-9]+" . | atoi }}
{{- $unit := regexFind "[a-zA-Zµ]+$" . }}
{{- if hasKey $perUnit $unit }}
{{- $total = add $total (mul $n (get $perUnit $unit)) }}
{{- else if hasKey $perMs $unit }}
{{- $total = add $total (div (add $n (sub (get $perMs $unit) 1)) (get $perMs $unit)) }}
{{- else }}
{{- fail (printf "duration %q: unknown unit %q" (toString $) $unit) }}
{{- end }}
{{- end }}
{{- $total }}
{{- end }}

{{/* Render-time checks of values that the schema cannot express. */}}
{{- define "mrtr-gateway.validate" -}}
{{- $mrtr := .Values.config.mrtr | default dict }}
{{- $heldTtl := get $mrtr "held_ttl" | default "50s" }}
{{- $grace := mul (int .Values.terminationGracePeriodSeconds) 1000 }}
{{- $needed := add (mul (add (int .Values.preStopSleepSeconds) (int .Values.shutdownDelaySeconds) (int .Values.drainTimeoutSeconds)) 1000) (include "mrtr-gateway.durationMs" $heldTtl | atoi) }}
{{- if le $grace $needed }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than preStopSleepSeconds + shutdownDelaySeconds + drainTimeoutSeconds + config.mrtr.held_ttl (%d + %d + %d + %s)" (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) (int .Values.shutdownDelaySeconds) (int .Values.drainTimeoutSeconds) (toString $heldTtl)) }}
{{- end }}
{{- if .Values.fleet.enabled }}
{{- if has (int .Values.ports.peer) (list (int .Values.ports.mcp) (int .Values.ports.admin)) }}
{{- fail (printf "ports.peer (%d) must differ from ports.mcp and ports.admin: it is the fleet's own listener" (int .Values.ports.peer)) }}
{{- end }}
{{- if not (or (include "mrtr-gateway.keySecretName" .) (get $mrtr "keys")) }}
{{- fail "fleet.enabled needs a key ring shared by the pods: keyRing.create, keyRing.existingSecret or config.mrtr.keys (or set fleet.enabled=false)" }}
{{- end }}
{{- with .Values.fleet.peerTimeout }}
{{- $ms := include "mrtr-gateway.durationMs" . | atoi }}
{{- if or (lt $ms 100) (gt $ms 60000) }}
{{- fail (printf "fleet.peerTimeout (%s) must be between 100ms and 60s" .) }}
{{- end }}
{{- end }}
{{- range .Values.env }}
{{- if eq .name "POD_IP" }}
{{- fail "env: POD_IP is set by the chart when fleet.enabled (the address in [fleet] advertise); leave it out" }}
{{- end }}
{{- end }}
{{- end }}
{{- $backends := .Values.config.backend | default dict }}
{{- range $i, $route := .Values.config.route }}
{{- if eq (empty $route.backend) (empty $route.backends) }}
{{- fail (printf "config.route[%d]: needs exactly one of backend and backends" $i) }}
{{- end }}
{{- $field := ternary "backends" "backend" (not (empty $route.backends)) }}
{{- range $name := $route.backends | default (list $route.backend) }}
{{- if not (hasKey $backends $name) }}
{{- fail (printf "config.route[%d].%s: no config.backend.%s is defined" $i $field $name) }}
{{- end }}
{{- end }}
{{- if not (and $route.auth $route.auth.mode) }}
{{- fail (printf "config.route[%d].auth: required (mode none, bearer or jwt)" $i) }}
{{- end }}
{{- range $name := $route.backends | default (list $route.backend) }}
{{- if and (ne $route.auth.mode "jwt") (index $backends $name).token_exchange }}
{{- fail (printf "config.route[%d].auth: backend %s exchanges the caller's token (token_exchange): the route must take JWTs (mode jwt)" $i $name) }}
{{- end }}
{{- end }}
{{- if eq $route.auth.mode "none" }}
{{- range $r, $rule := $route.policy }}
{{- if $rule.scopes }}
{{- fail (printf "config.route[%d].policy[%d].scopes: an anonymous caller has no scopes (route auth mode none)" $i $r) }}
{{- end }}
{{- end }}
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
{{- $server := merge (dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.mcp)) "admin_listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) "drain_timeout" (printf "%ds" (int .Values.drainTimeoutSeconds)) "shutdown_delay" (printf "%ds" (int .Values.shutdownDelaySeconds))) (deepCopy ($config.server | default dict)) }}
{{- if include "mrtr-gateway.unauthenticated" . }}
{{- $_ := set $server "allow_unauthenticated" true }}
{{- end }}
{{- $used := list }}
{{- range $config.route }}
{{- $used = concat $used (.backends | default (list .backend)) }}
{{- end -}}
# Rendered by the mrtr-gateway Helm chart from the release's values (config, ports,
# shutdownDelaySeconds, drainTimeoutSeconds, keyRing, fleet).
[server]
{{- include "mrtr-gateway.tomlBody" (dict "table" $server "first" (list "listen" "admin_listen" "drain_timeout" "shutdown_delay")) }}
{{- range $route := $config.route }}

[[route]]
{{- include "mrtr-gateway.tomlBody" (dict "table" $route "first" (list "path" "backend" "backends")) }}
{{- end }}
{{- range $name := keys $config.backend | sortAlpha }}
{{- if has $name $used }}
{{- $backend := index $config.backend $name }}

[backend.{{ include "mrtr-gateway.tomlKey" $name }}]
{{- include "mrtr-gateway.tomlBody" (dict "table" $backend "first" (list "era" "transport" "command" "args" "url") "skip" (list "pool")) }}
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
{{- with $config.legacy }}

[legacy]
{{- include "mrtr-gateway.tomlBody" (dict "table" . "first" (list "max_sessions" "max_sessions_per_principal" "idle_timeout" "initialize_timeout" "replay_events")) }}
{{- end }}
{{- with $config.audit }}

[audit]
{{- include "mrtr-gateway.tomlBody" (dict "table" . "first" (list "file" "arguments" "queue")) }}
{{- end }}
{{- if .Values.fleet.enabled }}
{{- $fleet := dict "advertise" (printf "${POD_IP}:%d" (int .Values.ports.peer)) "listen" (printf "0.0.0.0:%d" (int .Values.ports.peer)) }}
{{- with .Values.fleet.allowedPeers }}
{{- $_ := set $fleet "allowed_peers" . }}
{{- end }}
{{- with .Values.fleet.peerTimeout }}
{{- $_ := set $fleet "peer_timeout" . }}
{{- end }}

[fleet]
{{- include "mrtr-gateway.tomlBody" (dict "table" $fleet "first" (list "advertise" "listen" "allowed_peers" "peer_timeout")) }}
{{- end }}
{{- end }}

{{/*
PromQL label matchers that select this release's gateway metrics (prometheusRule.matchers, or
the labels the Prometheus Operator gives the ServiceMonitor's targets).
*/}}
{{- define "mrtr-gateway.ruleMatchers" -}}
{{- .Values.prometheusRule.matchers | default (printf "namespace=%q,job=%q" .Release.Namespace (include "mrtr-gateway.fullname" .)) }}
{{- end }}
