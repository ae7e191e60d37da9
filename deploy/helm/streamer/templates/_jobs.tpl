{{/* Batch jobs (jobs.enabled): the config's jobs: section, the pods' image and environment, and the chart's refusals */}}

{{/* The config's jobs: section; called with (dict "root" $ "api" BOOL), api adding the HTTP API's token */}}
{{- define "streamer.jobs.section" -}}
{{- $j := .root.Values.jobs -}}
jobs:
  topic: {{ $j.topic | quote }}
  status_topic: {{ $j.statusTopic | quote }}
  group_id: {{ $j.groupId | quote }}
  partitions: {{ $j.partitions | int }}
  progress_ms: {{ $j.progressMs | int }}
  {{- with $j.files }}
  files: {{ . | quote }}
  {{- end }}
  max_upload_bytes: {{ $j.maxUploadBytes | int64 }}
  {{- if .api }}
  api_token: ${JOBS_API_TOKEN}
  {{- end }}
{{- end -}}

{{/* The jobs pods' lake: section: lake.s3 when the warehouse or files is s3://, or an endpoint is set */}}
{{- define "streamer.jobs.lake" -}}
{{- $j := .Values.jobs }}
{{- include "streamer.lake" (dict "lake" $j.lake "s3" (or (hasPrefix "s3://" (toString $j.lake.warehouse)) (hasPrefix "s3://" (toString $j.files)) (not (empty $j.lake.s3.endpoint)))) }}
{{- end -}}

{{/* The config of the jobs pods: the processors' config with the lake: and jobs: sections */}}
{{- define "streamer.jobs.config" -}}
{{ include "streamer.config" . }}
{{ include "streamer.jobs.lake" . }}
{{ include "streamer.jobs.section" (dict "root" . "api" false) }}
{{- end -}}

{{/* Whether the online server serves the jobs API: "true" or "" */}}
{{- define "streamer.jobs.api" -}}
{{- if and .Values.jobs.enabled .Values.jobs.apiToken.secret }}true{{ end -}}
{{- end -}}

{{- define "streamer.jobs.image" -}}
{{- if .Values.jobs.imageTag }}{{ printf "%s:%s" .Values.image.repository (toString .Values.jobs.imageTag) }}{{ else }}{{ include "streamer.image" . }}{{ end -}}
{{- end -}}

{{/* The jobs pods' environment: POD_NAME (the config's group.instance.id), secretEnv and jobs.secretEnv */}}
{{- define "streamer.jobs.env" -}}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  {{- with include "streamer.secretEnv" . | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with include "streamer.secretEnvFrom" .Values.jobs.secretEnv | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with include "streamer.kv.env" . | trim }}{{ . | nindent 2 }}{{ end }}
{{- end -}}

{{/* jobs.volume as a list of volumes, and of mounts; called with (dict "root" $ "what" "volumes"|"mounts") */}}
{{- define "streamer.jobs.volume" -}}
{{- $v := .root.Values.jobs.volume }}
{{- if $v.claimName }}
{{- if eq .what "mounts" }}
{{- toYaml (list (dict "name" "lake" "mountPath" $v.mountPath)) }}
{{- else }}
{{- toYaml (list (dict "name" "lake" "persistentVolumeClaim" (dict "claimName" $v.claimName))) }}
{{- end }}
{{- else }}[]{{ end }}
{{- end -}}

{{/* A spec file's key in the jobs ConfigMap, and its path in the pods */}}
{{- define "streamer.jobs.specKey" -}}
{{- printf "job-%s.yaml" . -}}
{{- end -}}

{{/* A scheduled or triggered job's spec as its file holds it: the entry's spec with its name (and schedule, timezone) */}}
{{- define "streamer.jobs.spec" -}}
{{- $spec := deepCopy (.job.spec | default dict) }}
{{- $_ := set $spec "name" .job.name }}
{{- if .scheduled }}
{{- $_ := set $spec "schedule" .job.schedule }}
{{- $_ := set $spec "timezone" (.job.timezone | default "UTC") }}
{{- end }}
{{- toYaml $spec }}
{{- end -}}

{{/* Refuse jobs that cannot run as configured */}}
{{- define "streamer.jobs.check" -}}
{{- $j := .Values.jobs }}
{{- $fullname := include "streamer.fullname" . }}
{{- $floor := add (div (int .Values.output.ackTimeoutMs) 1000) 30 }}
{{- if le (int $j.workers.terminationGracePeriodSeconds) (int $floor) }}
{{- fail (printf "jobs.workers.terminationGracePeriodSeconds (%v) must exceed output.ackTimeoutMs + 30 s (%v s): a stopping worker scores, writes and commits the chunk in hand" $j.workers.terminationGracePeriodSeconds $floor) }}
{{- end }}
{{- if gt (int $j.workers.replicas) (int $j.partitions) }}
{{- fail (printf "jobs.workers.replicas (%v) exceeds jobs.partitions (%v): a worker holds a partition of the queue to take jobs, the extra ones would idle" $j.workers.replicas $j.partitions) }}
{{- end }}
{{- if not (has $j.lake.catalog (list "sql" "rest")) }}
{{- fail (printf "jobs.lake.catalog %q: sql or rest" (toString $j.lake.catalog)) }}
{{- end }}
{{- if not $j.lake.warehouse }}
{{- fail "jobs.lake.warehouse is required with jobs.enabled: s3://bucket/prefix or a folder on jobs.volume, where every worker writes" }}
{{- end }}
{{- if not $j.lake.catalogUri }}
{{- fail (printf "jobs.lake.catalogUri is required with jobs.enabled: %s" (ternary "the REST catalog's URL" "a SQLAlchemy URL every pod reaches (the default SQLite file would lie in each pod's read-only config folder)" (eq $j.lake.catalog "rest"))) }}
{{- end }}
{{- $shared := printf "%s/" (trimSuffix "/" $j.volume.mountPath) }}
{{- range $key, $where := dict "lake.warehouse" $j.lake.warehouse "files" $j.files }}
{{- if and $where (not (hasPrefix "s3://" $where)) (not (and $j.volume.claimName (hasPrefix $shared $where))) }}
{{- fail (printf "jobs.%s %q: the jobs' pods share no disk; give s3://... or a folder under jobs.volume.mountPath (%s) with jobs.volume.claimName set" $key $where $j.volume.mountPath) }}
{{- end }}
{{- end }}
{{- if and $j.apiToken.secret (not .Values.online.enabled) }}
{{- fail "jobs.apiToken.secret: the jobs API is served by the online server; set online.enabled too" }}
{{- end }}
{{- $names := dict }}
{{- range $kind := list "scheduled" "triggered" }}
{{- range $i, $job := index $j $kind }}
{{- $at := printf "jobs.%s[%d]" $kind $i }}
{{- if not (kindIs "map" $job) }}
{{- fail (printf "%s: a {name, %sspec} mapping" $at (ternary "schedule, timezone, " "" (eq $kind "scheduled"))) }}
{{- end }}
{{- if not $job.name }}
{{- fail (printf "%s.name is required: it names the %s and the job's ids" $at (ternary "CronJob" "Deployment" (eq $kind "scheduled"))) }}
{{- end }}
{{- $name := toString $job.name }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "%s.name %q: lowercase letters, digits and '-' only (it names a Kubernetes object)" $at $name) }}
{{- end }}
{{- $object := printf "%s-%s-%s" $fullname (ternary "job" "watch" (eq $kind "scheduled")) $name }}
{{- $limit := ternary 52 63 (eq $kind "scheduled") }}
{{- if gt (len $object) $limit }}
{{- fail (printf "%s.name %q: the name %s is longer than %d characters" $at $name $object $limit) }}
{{- end }}
{{- if hasKey $names $name }}
{{- fail (printf "%s.name %q: %s has it too; each job's name is its own" $at $name (get $names $name)) }}
{{- end }}
{{- $_ := set $names $name $at }}
{{- if not (kindIs "map" $job.spec) }}
{{- fail (printf "%s.spec is required: the job's source, target and the rest of its fields" $at) }}
{{- end }}
{{- range $key := list "name" "schedule" "timezone" }}
{{- if hasKey $job.spec $key }}
{{- fail (printf "%s.spec.%s: give it as %s.%s (the chart writes it into the spec)" $at $key $at $key) }}
{{- end }}
{{- end }}
{{- if eq $kind "scheduled" }}
{{- if not $job.schedule }}
{{- fail (printf "%s.schedule is required: a cron schedule of 5 fields, e.g. \"0 2 * * *\"" $at) }}
{{- end }}
{{- if not (regexMatch "^[^ ]+( [^ ]+){4}$" (toString $job.schedule)) }}
{{- fail (printf "%s.schedule %q: a cron schedule of 5 fields, e.g. \"0 2 * * *\" (the zone goes in timezone)" $at (toString $job.schedule)) }}
{{- end }}
{{- if hasKey $job.spec "trigger" }}
{{- fail (printf "%s.spec.trigger: a scheduled job reads its source at each slot; a triggered one goes in jobs.triggered" $at) }}
{{- end }}
{{- else if not (kindIs "map" $job.spec.trigger) }}
{{- fail (printf "%s.spec.trigger is required: {table: NAME} or {folder: PATH}" $at) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The pod of a scheduled job's submission or a triggered job's watch; called with (dict "root" $ "component" C "args" LIST "restartPolicy" P), optionally "job" (a label) and "checksum" */}}
{{- define "streamer.jobs.pod" -}}
{{- $root := .root -}}
metadata:
  labels:
    {{- include "streamer.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- with .job }}
    streamer.io/job: {{ . }}
    {{- end }}
  {{- with .checksum }}
  annotations:
    checksum/config: {{ . }}
  {{- end }}
spec:
  restartPolicy: {{ .restartPolicy }}
  {{- with include "streamer.imagePullSecrets" $root | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with include "streamer.downloads" $root | trim }}{{ . | nindent 2 }}{{ end }}
  {{- include "streamer.podSecurityContext" $root | nindent 2 }}
  containers:
    - name: streamer
      image: {{ include "streamer.jobs.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args: {{ toJson .args }}
      {{- include "streamer.jobs.env" $root | nindent 6 }}
      resources:
        {{- toYaml $root.Values.jobs.submitResources | nindent 8 }}
      {{- include "streamer.containerSecurityContext" $root | nindent 6 }}
      {{- include "streamer.volumeMounts" (dict "root" $root "extra" (include "streamer.jobs.volume" (dict "root" $root "what" "mounts") | fromYamlArray)) | nindent 6 }}
  {{- include "streamer.volumes" (dict "root" $root "config" (printf "%s-jobs-config" (include "streamer.fullname" $root)) "extra" (include "streamer.jobs.volume" (dict "root" $root "what" "volumes") | fromYamlArray)) | nindent 2 }}
  {{- with $root.Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $root.Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
