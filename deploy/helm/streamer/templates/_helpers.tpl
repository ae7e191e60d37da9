{{- define "streamer.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamer.labels" -}}
app.kubernetes.io/name: streamer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "streamer.selector" -}}
app.kubernetes.io/name: streamer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "streamer.image" -}}
{{- $tag := ternary .Values.image.gpuTag .Values.image.tag .Values.gpu.enabled -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "streamer.secretEnv" -}}
{{- include "streamer.secretEnvFrom" .Values.secretEnv }}
{{- end -}}

{{/* env entries from a list of {name, secret, key} */}}
{{- define "streamer.secretEnvFrom" -}}
{{- range . }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}
{{- end -}}


{{- define "streamer.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* files.models and files.schemas: one source each (ConfigMap, PVC or a download into an emptyDir) */}}
{{- define "streamer.fileSources" -}}
{{- range $what, $f := .Values.files }}
{{- $n := add (ternary 1 0 (not (empty $f.configMap))) (ternary 1 0 (not (empty $f.claimName))) (ternary 1 0 (not (empty $f.download))) }}
{{- if gt (int $n) 1 }}
{{- fail (printf "files.%s: set one of configMap, claimName and download, not %d" $what (int $n)) }}
{{- end }}
{{- if and (not (empty $f.download)) (not $f.download.image) }}
{{- fail (printf "files.%s.download needs an image (and a command that writes into %s)" $what $f.mountPath) }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "streamer.fileVolumes" -}}
{{- include "streamer.fileSources" . }}
{{- range $what, $f := .Values.files }}
{{- if $f.configMap }}
- name: {{ $what }}
  configMap:
    name: {{ $f.configMap }}
{{- else if $f.claimName }}
- name: {{ $what }}
  persistentVolumeClaim:
    claimName: {{ $f.claimName }}
    readOnly: true
{{- else if $f.download }}
- name: {{ $what }}
  emptyDir: {}
{{- end }}
{{- end }}
{{- end -}}

{{- define "streamer.fileMounts" -}}
{{- range $what, $f := .Values.files }}
{{- if or $f.configMap $f.claimName $f.download }}
- name: {{ $what }}
  mountPath: {{ $f.mountPath }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "streamer.downloads" -}}
{{- $any := false }}
{{- range $what, $f := .Values.files }}{{ if $f.download }}{{ $any = true }}{{ end }}{{ end }}
{{- if $any }}
initContainers:
{{- range $what, $f := .Values.files }}
{{- with $f.download }}
  - name: download-{{ $what }}
    image: {{ .image }}
    imagePullPolicy: {{ $.Values.image.pullPolicy }}
    {{- with .command }}
    command: {{ toJson . }}
    {{- end }}
    {{- with .args }}
    args: {{ toJson . }}
    {{- end }}
    env:
      - name: TARGET_DIR
        value: {{ $f.mountPath | quote }}
      {{- include "streamer.secretEnv" $ | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
    volumeMounts:
      - name: {{ $what }}
        mountPath: {{ $f.mountPath }}
      - name: tmp
        mountPath: /tmp
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The streamer config every pod reads (config.yaml of the ConfigMaps), without the lake: section */}}
{{- define "streamer.config" -}}
kafka:
  bootstrap.servers: {{ .Values.kafka.bootstrapServers | quote }}
  client.id: streamer
  group.instance.id: ${POD_NAME}
  session.timeout.ms: {{ .Values.kafka.sessionTimeoutMs }}
  {{- range $key, $value := .Values.kafka.properties }}
  {{ $key }}: {{ $value | quote }}
  {{- end }}
input:
  topics: [{{ .Values.input.topic | quote }}]
  group_id: {{ .Values.input.groupId | quote }}
  format: {{ .Values.input.format }}
  schema: {{ .Values.input.schema | quote }}
  {{- with .Values.input.registry }}
  registry:
    url: {{ .url | quote }}
    {{- with .basicAuthUserInfo }}
    basic_auth_user_info: {{ . | quote }}
    {{- end }}
  {{- end }}
model:
  path: {{ .Values.model.path | quote }}
  name: {{ .Values.model.name | quote }}
  version: {{ .Values.model.version | quote }}
  providers: [{{ if .Values.gpu.enabled }}cuda, {{ end }}cpu]
  {{- with .Values.model.driftProfile }}
  drift_profile: {{ . | quote }}
  drift_window_rows: {{ $.Values.model.driftWindowRows | int }}
  {{- end }}
  reload_check_ms: {{ .Values.model.reloadCheckMs | int }}
  {{- with .Values.model.fallbackScores }}
  fallback_scores: [{{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s | float64 }}{{ end }}]
  {{- end }}
  {{- with .Values.model.fallbackPath }}
  fallback_path: {{ . | quote }}
  {{- end }}
  timeout_ms: {{ .Values.model.timeoutMs | int }}
  breaker_failures: {{ .Values.model.breakerFailures | int }}
batching:
  max_size: {{ .Values.batching.maxSize }}
  max_wait_ms: {{ .Values.batching.maxWaitMs }}
output:
  topic: {{ .Values.output.topic | quote }}
  schema: {{ .Values.output.schema | quote }}
  ack_timeout_ms: {{ .Values.output.ackTimeoutMs }}
processing:
  guarantee: {{ .Values.processing.guarantee }}
  commit_interval_ms: {{ .Values.processing.commitIntervalMs }}
metrics:
  enabled: true
  host: 0.0.0.0
  port: {{ .Values.metrics.port }}
{{- with .Values.shadow.challengers }}
shadow:
  challengers:
    {{- range . }}
    - {path: {{ .path | quote }}, name: {{ .name | quote }}, version: {{ .version | toString | quote }}}
    {{- end }}
  {{- with $.Values.shadow.topic }}
  topic: {{ . | quote }}
  {{- end }}
  flip_threshold: {{ $.Values.shadow.flipThreshold | float64 }}
{{- end }}
{{- with include "streamer.kv.section" . }}
{{ . }}
{{- end }}
{{- end -}}

{{/* What every pod that scores runs as: non-root, the files' group */}}
{{- define "streamer.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
{{- end -}}

{{- define "streamer.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{/* resources (a dict) with the GPU limit added when gpu.enabled; called with (dict "root" $ "resources" ...) */}}
{{- define "streamer.resources" -}}
{{- $resources := deepCopy .resources }}
{{- if .root.Values.gpu.enabled }}
{{- $_ := set $resources "limits" (merge (dict "nvidia.com/gpu" .root.Values.gpu.count) ($resources.limits | default dict)) }}
{{- end -}}
resources:
  {{- toYaml $resources | nindent 2 }}
{{- end -}}

{{/* The config (a ConfigMap named .config), /tmp and the model and schema volumes; called with (dict "root" $ "config" NAME) */}}
{{- define "streamer.volumes" -}}
volumes:
  - name: config
    configMap:
      name: {{ .config }}
  - name: tmp
    emptyDir: {}
  {{- with include "streamer.fileVolumes" .root | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with .extra }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{- define "streamer.volumeMounts" -}}
volumeMounts:
  - name: config
    mountPath: /etc/streamer
    readOnly: true
  - name: tmp
    mountPath: /tmp
  {{- with include "streamer.fileMounts" .root | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with .extra }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{/* nodeSelector (with the GPU's when gpu.enabled), tolerations and affinity */}}
{{- define "streamer.placement" -}}
{{- $selector := merge (dict) .Values.nodeSelector (ternary .Values.gpu.nodeSelector (dict) .Values.gpu.enabled) }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The backfill Job's name: one Job per run id, so the same runId is the same Job */}}
{{- define "streamer.backfill.name" -}}
{{- printf "%s-backfill-%s" (include "streamer.fullname" .) (toString .Values.backfill.runId) -}}
{{- end -}}

{{/* Refuse a backfill that cannot run as one exactly-once run over pods that share no disk */}}
{{- define "streamer.backfill.check" -}}
{{- $b := .Values.backfill }}
{{- $runId := toString $b.runId }}
{{- if not $b.runId }}
{{- fail "backfill.runId is required with backfill.enabled: every pod of the Job writes under it (the same runId continues a backfill, a new one starts another)" }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $runId) }}
{{- fail (printf "backfill.runId %q: lowercase letters, digits and '-' only (it names the Job)" $runId) }}
{{- end }}
{{- $name := include "streamer.backfill.name" . }}
{{- if gt (len $name) 63 }}
{{- fail (printf "backfill.runId: the Job's name %s is longer than 63 characters" $name) }}
{{- end }}
{{- if eq (ternary 1 0 (not (empty $b.table))) (ternary 1 0 (not (empty $b.parquet))) }}
{{- fail "backfill: set exactly one of backfill.table (an Iceberg table) and backfill.parquet (a Parquet dataset)" }}
{{- end }}
{{- range $key := list "from" "to" }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)$" (toString (index $b $key)) }}
{{- fail (printf "backfill.%s %q: a duration is measured from each pod's start, so shards would replay different ranges; give an ISO-8601 time, earliest, latest or partition:offset pairs" $key (toString (index $b $key))) }}
{{- end }}
{{- end }}
{{- if or (lt (int $b.shards) 1) (gt (int $b.shards) (int .Values.input.partitions)) }}
{{- fail (printf "backfill.shards (%v) must be between 1 and input.partitions (%v): a shard past the partitions has nothing to read" $b.shards .Values.input.partitions) }}
{{- end }}
{{- if not (has $b.lake.catalog (list "sql" "rest")) }}
{{- fail (printf "backfill.lake.catalog %q: sql or rest" (toString $b.lake.catalog)) }}
{{- end }}
{{- if and $b.table (not $b.lake.warehouse) }}
{{- fail "backfill.lake.warehouse is required with backfill.table: s3://bucket/prefix or a folder on backfill.volume" }}
{{- end }}
{{- $shared := printf "%s/" (trimSuffix "/" $b.volume.mountPath) }}
{{- range $key, $where := dict "lake.warehouse" (ternary $b.lake.warehouse "" (not (empty $b.table))) "parquet" $b.parquet }}
{{- if and $where (not (hasPrefix "s3://" $where)) (not (and $b.volume.claimName (hasPrefix $shared $where))) }}
{{- fail (printf "backfill.%s %q: the Job's pods share no disk; give s3://... or a folder under backfill.volume.mountPath (%s) with backfill.volume.claimName set" $key $where $b.volume.mountPath) }}
{{- end }}
{{- end }}
{{- if and $b.table (eq $b.lake.catalog "sql") (not $b.lake.catalogUri) }}
{{- fail "backfill.lake.catalogUri is required with backfill.table and catalog sql: the default SQLite file would lie in each pod's read-only config folder, one catalog per pod" }}
{{- end }}
{{- if and (eq $b.lake.catalog "rest") (not $b.lake.catalogUri) }}
{{- fail "backfill.lake.catalogUri is required with catalog rest: the REST catalog's URL" }}
{{- end }}
{{- end -}}

{{/* The config's lake: section for the backfill's pods */}}
{{- define "streamer.backfill.lake" -}}
{{- $b := .Values.backfill }}
{{- include "streamer.lake" (dict "lake" $b.lake "s3" (or (hasPrefix "s3://" (toString $b.lake.warehouse)) (hasPrefix "s3://" (toString $b.parquet)))) }}
{{- end -}}

{{/* A config's lake: section from a lake value (backfill.lake, jobs.lake); called with (dict "lake" LAKE "s3" BOOL), s3 rendering lake.s3 */}}
{{- define "streamer.lake" -}}
{{- $lake := .lake -}}
lake:
  {{- with $lake.warehouse }}
  warehouse: {{ . | quote }}
  {{- end }}
  catalog: {{ $lake.catalog }}
  {{- with $lake.catalogUri }}
  catalog_uri: {{ . | quote }}
  {{- end }}
  namespace: {{ $lake.namespace | quote }}
  target_file_mb: {{ $lake.targetFileMb | int }}
  {{- if .s3 }}
  s3:
    {{- with $lake.s3.endpoint }}
    endpoint: {{ . | quote }}
    {{- end }}
    region: {{ $lake.s3.region | quote }}
    access_key_id: {{ $lake.s3.accessKeyId | quote }}
    secret_access_key: {{ $lake.s3.secretAccessKey | quote }}
  {{- end }}
{{- end -}}

{{/* Refuse an online server that cannot listen or stop as configured */}}
{{- define "streamer.online.check" -}}
{{- $o := .Values.online }}
{{- range $key := list "httpPort" "grpcPort" }}
{{- $port := int (index $o $key) }}
{{- if or (lt $port 0) (gt $port 65535) (and (eq $key "httpPort") (eq $port 0)) }}
{{- fail (printf "online.%s (%v) must be a port between 1 and 65535%s" $key (index $o $key) (ternary "" ", or 0 for no gRPC" (eq $key "httpPort"))) }}
{{- end }}
{{- end }}
{{- if eq (int $o.httpPort) (int $o.grpcPort) }}
{{- fail (printf "online.grpcPort (%v) equals online.httpPort: HTTP and gRPC each need a port of their own" $o.grpcPort) }}
{{- end }}
{{- $drainS := add (int $o.preStopSleepSeconds) (div (add (int $o.timeoutMs) 999) 1000) }}
{{- if le (int $o.terminationGracePeriodSeconds) (int (add $drainS 10)) }}
{{- fail (printf "online.terminationGracePeriodSeconds (%v) must exceed online.preStopSleepSeconds + online.timeoutMs (about %v s) by 10 s: admitted requests are answered within their deadline" $o.terminationGracePeriodSeconds $drainS) }}
{{- end }}
{{- if $o.autoscaling.enabled }}
{{- if gt (int $o.autoscaling.minReplicas) (int $o.autoscaling.maxReplicas) }}
{{- fail (printf "online.autoscaling.minReplicas (%v) exceeds online.autoscaling.maxReplicas (%v)" $o.autoscaling.minReplicas $o.autoscaling.maxReplicas) }}
{{- end }}
{{- if and $o.autoscaling.keda (not $o.autoscaling.prometheusAddress) }}
{{- fail "online.autoscaling.prometheusAddress is required with online.autoscaling.keda: KEDA's prometheus scaler reads streamer_online_queued_rows there (or set keda: false for an HPA on a custom metrics adapter)" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The config's online: section for the online server's pods */}}
{{- define "streamer.online.section" -}}
{{- $o := .Values.online -}}
online:
  host: 0.0.0.0
  http_port: {{ $o.httpPort | int }}
  grpc_port: {{ $o.grpcPort | int }}
  {{- if not (kindIs "invalid" $o.maxSize) }}
  max_size: {{ $o.maxSize | int }}
  {{- end }}
  {{- if not (kindIs "invalid" $o.maxWaitMs) }}
  max_wait_ms: {{ $o.maxWaitMs | int }}
  {{- end }}
  timeout_ms: {{ $o.timeoutMs | int }}
  max_queue_rows: {{ $o.maxQueueRows | int }}
  max_body_bytes: {{ $o.maxBodyBytes | int64 }}
  {{- include "streamer.online.stores" . | nindent 2 }}
{{- end -}}
