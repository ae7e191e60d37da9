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
{{- range .Values.secretEnv }}
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
