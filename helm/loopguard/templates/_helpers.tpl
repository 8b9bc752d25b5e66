{{/* Name of the chart, overridable. */}}
{{- define "loopguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name of the release's objects. */}}
{{- define "loopguard.fullname" -}}
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

{{- define "loopguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "loopguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loopguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "loopguard.labels" -}}
helm.sh/chart: {{ include "loopguard.chart" . }}
{{ include "loopguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: guard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "loopguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "loopguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "loopguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
[kafka.properties]: security.protocol and the SASL/TLS properties derived from kafkaAuth,
then config.kafka.properties, which win on a key clash. Every value is written as a string
(librdkafka takes strings); whole numbers keep their integer form.
*/}}
{{- define "loopguard.kafkaPropertiesToml" -}}
{{- $auth := .Values.kafkaAuth }}
{{- $props := dict }}
{{- if and $auth.sasl.enabled $auth.tls.enabled }}
{{- $_ := set $props "security.protocol" "SASL_SSL" }}
{{- else if $auth.sasl.enabled }}
{{- $_ := set $props "security.protocol" "SASL_PLAINTEXT" }}
{{- else if $auth.tls.enabled }}
{{- $_ := set $props "security.protocol" "SSL" }}
{{- end }}
{{- if $auth.sasl.enabled }}
{{- $_ := set $props "sasl.mechanism" $auth.sasl.mechanism }}
{{- end }}
{{- if and $auth.tls.enabled $auth.tls.existingSecret }}
{{- if $auth.tls.caKey }}
{{- $_ := set $props "ssl.ca.location" (printf "%s/%s" $auth.tls.mountPath $auth.tls.caKey) }}
{{- end }}
{{- if $auth.tls.certKey }}
{{- $_ := set $props "ssl.certificate.location" (printf "%s/%s" $auth.tls.mountPath $auth.tls.certKey) }}
{{- $_ := set $props "ssl.key.location" (printf "%s/%s" $auth.tls.mountPath $auth.tls.keyKey) }}
{{- end }}
{{- end }}
{{- range $key, $value := (default dict .Values.config.kafka.properties) }}
{{- $_ := set $props $key $value }}
{{- end }}
{{- range $key, $value := $props }}
{{- $text := toString $value }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $text = toString (int64 $value) }}
{{- end }}
{{ $key | toJson }} = {{ $text | toJson }}
{{- end }}
{{- end }}

{{/* The TOML configuration file. Strings go through toJson, which TOML accepts as basic strings. */}}
{{- define "loopguard.configToml" -}}
{{- $k := .Values.config.kafka -}}
{{- $m := .Values.config.metrics -}}
{{- $e := .Values.config.engine -}}
# Rendered by the loopguard Helm chart from .Values.config; edit the values, not this file.
# Secrets are not here: they arrive as LOOPGUARD__SECTION__KEY environment variables.
[kafka]
bootstrap_servers = {{ $k.bootstrap_servers | toJson }}
group_id = {{ $k.group_id | toJson }}
events_topic = {{ $k.events_topic | toJson }}
verdicts_topic = {{ $k.verdicts_topic | toJson }}
dlq_topic = {{ $k.dlq_topic | toJson }}
state_topic = {{ $k.state_topic | toJson }}
policy_topic = {{ default "loopguard-policy" $k.policy_topic | toJson }}
delivery = {{ $k.delivery | toJson }}
transactional_id_prefix = {{ $k.transactional_id_prefix | toJson }}
batch_max_events = {{ $k.batch_max_events | int64 }}
batch_max_ms = {{ $k.batch_max_ms | int64 }}
{{- range $key := list "checkpoint_max_ms" "checkpoint_max_events" "queue_max_messages" "queue_max_kbytes" "threads" "judged_max_ms" "backlog_pace_percent" }}
{{- if hasKey $k $key }}
{{ $key }} = {{ get $k $key | int64 }}
{{- end }}
{{- end }}

[kafka.properties]
{{- include "loopguard.kafkaPropertiesToml" . }}

[admin]
listen = {{ printf "0.0.0.0:%d" (.Values.admin.port | int) | toJson }}
debug_token = ""

[metrics]
tenant_label = {{ $m.tenant_label }}
model_label = {{ $m.model_label }}
tenant_allow_list = {{ default list $m.tenant_allow_list | toJson }}
model_allow_list = {{ default list $m.model_allow_list | toJson }}
agent_label = {{ default false $m.agent_label }}
agent_allow_list = {{ default list $m.agent_allow_list | toJson }}

[engine]
session_ttl_secs = {{ $e.session_ttl_secs | int64 }}
max_sessions_per_partition = {{ $e.max_sessions_per_partition | int64 }}
{{- range $key := list "max_text_bytes" "dedup_ids" "hot_text_sessions" }}
{{- if hasKey $e $key }}
{{ $key }} = {{ get $e $key | int64 }}
{{- end }}
{{- end }}
{{- with .Values.config.policyToml }}

{{ . }}
{{- end }}
{{- end }}

{{/* Refuses settings that cannot work, before anything is applied. */}}
{{- define "loopguard.validate" -}}
{{- $p := int .Values.partitions }}
{{- $keda := .Values.autoscaling.keda }}
{{- $hpa := .Values.autoscaling.hpa }}
{{- if and $keda.enabled $hpa.enabled }}
{{- fail "autoscaling.keda.enabled and autoscaling.hpa.enabled are mutually exclusive: enable one" }}
{{- end }}
{{- if $keda.enabled }}
{{- if gt (int $keda.maxReplicaCount) $p }}
{{- fail (printf "autoscaling.keda.maxReplicaCount (%d) exceeds partitions (%d): replicas beyond the partition count of the events topic own no partition" (int $keda.maxReplicaCount) $p) }}
{{- end }}
{{- if gt (int $keda.minReplicaCount) (int $keda.maxReplicaCount) }}
{{- fail "autoscaling.keda.minReplicaCount exceeds autoscaling.keda.maxReplicaCount" }}
{{- end }}
{{- else if $hpa.enabled }}
{{- if gt (int $hpa.maxReplicas) $p }}
{{- fail (printf "autoscaling.hpa.maxReplicas (%d) exceeds partitions (%d): replicas beyond the partition count of the events topic own no partition" (int $hpa.maxReplicas) $p) }}
{{- end }}
{{- if gt (int $hpa.minReplicas) (int $hpa.maxReplicas) }}
{{- fail "autoscaling.hpa.minReplicas exceeds autoscaling.hpa.maxReplicas" }}
{{- end }}
{{- else if gt (int .Values.replicaCount) $p }}
{{- fail (printf "replicaCount (%d) exceeds partitions (%d): replicas beyond the partition count of the events topic own no partition" (int .Values.replicaCount) $p) }}
{{- end }}
{{- if not .Values.config.kafka.bootstrap_servers }}
{{- fail "config.kafka.bootstrap_servers is empty: the in-process demo broker is not for Kubernetes" }}
{{- end }}
{{- if and .Values.kafkaAuth.sasl.enabled (not .Values.kafkaAuth.sasl.existingSecret) }}
{{- fail "kafkaAuth.sasl.enabled needs kafkaAuth.sasl.existingSecret (a Secret with the username and password)" }}
{{- end }}
{{- if and .Values.kafkaAuth.tls.enabled .Values.kafkaAuth.tls.certKey (not .Values.kafkaAuth.tls.keyKey) }}
{{- fail "kafkaAuth.tls.certKey needs kafkaAuth.tls.keyKey" }}
{{- end }}
{{- end }}
