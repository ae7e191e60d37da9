{{/* The key-value store (kv.address): the config's kv: section, the password's env var, the online server's cache: and features: sections, and the chart's refusals */}}

{{/* The config's kv: section ("" without kv.address); the password is a ${KV_PASSWORD} reference, never its text */}}
{{- define "streamer.kv.section" -}}
{{- $kv := .Values.kv -}}
{{- if $kv.address -}}
kv:
  address: {{ $kv.address | quote }}
  kind: {{ $kv.kind }}
  {{- if eq $kv.kind "sentinel" }}
  master: {{ $kv.master | quote }}
  {{- end }}
  db: {{ $kv.db | int }}
  {{- with $kv.username }}
  username: {{ . | quote }}
  {{- end }}
  {{- if $kv.passwordSecret.name }}
  password: ${KV_PASSWORD}
  {{- end }}
  tls: {{ $kv.tls }}
  prefix: {{ $kv.prefix | quote }}
  ttl_s: {{ $kv.ttlSeconds | int }}
  keep_previous_s: {{ $kv.keepPreviousSeconds | int }}
  timeout_ms: {{ $kv.timeoutMs | int }}
  pipeline_rows: {{ $kv.pipelineRows | int }}
  commit_rows: {{ $kv.commitRows | int }}
{{- end }}
{{- end -}}

{{/* KV_PASSWORD from kv.passwordSecret, for every pod that loads a config with the kv: section ("" without one) */}}
{{- define "streamer.kv.env" -}}
{{- $kv := .Values.kv }}
{{- if and $kv.address $kv.passwordSecret.name }}
{{- include "streamer.secretEnvFrom" (list (dict "name" "KV_PASSWORD" "secret" $kv.passwordSecret.name "key" $kv.passwordSecret.key)) }}
{{- end }}
{{- end -}}

{{/* The online: section's cache: and features: (indented under online:) */}}
{{- define "streamer.online.stores" -}}
{{- $c := .Values.online.cache }}
{{- $f := .Values.online.features -}}
cache:
  mode: {{ $c.mode }}
  max_age_s: {{ $c.maxAgeSeconds | int }}
features:
  kind: {{ $f.kind }}
  {{- if eq $f.kind "feast" }}
  url: {{ $f.url | quote }}
  {{- with $f.features }}
  features: {{ toJson . }}
  {{- end }}
  {{- with $f.featureService }}
  feature_service: {{ . | quote }}
  {{- end }}
  entity_key: {{ $f.entityKey | quote }}
  {{- end }}
  {{- if eq $f.kind "redis" }}
  prefix: {{ $f.prefix | quote }}
  {{- end }}
  timeout_ms: {{ $f.timeoutMs | int }}
  {{- with $f.defaults }}
  defaults: {{ toJson . }}
  {{- end }}
{{- end -}}

{{/* Refuse a store the pods could not reach as configured, and a password in values */}}
{{- define "streamer.kv.check" -}}
{{- $kv := .Values.kv }}
{{- if hasKey $kv "password" }}
{{- fail "kv.password: a password never goes in values (it would be written into a ConfigMap); put it in a Secret and name it in kv.passwordSecret {name, key}" }}
{{- end }}
{{- if not (has $kv.kind (list "node" "cluster" "sentinel")) }}
{{- fail (printf "kv.kind %q: node, cluster or sentinel" (toString $kv.kind)) }}
{{- end }}
{{- if and (eq $kv.kind "node") (contains "," (toString $kv.address)) }}
{{- fail (printf "kv.address %q names several servers: set kv.kind to cluster or sentinel" (toString $kv.address)) }}
{{- end }}
{{- if and $kv.passwordSecret.name (not $kv.passwordSecret.key) }}
{{- fail "kv.passwordSecret.key is required with kv.passwordSecret.name: the Secret's key that holds the password" }}
{{- end }}
{{- $o := .Values.online }}
{{- if not (has $o.cache.mode (list "fresh" "cached" "auto")) }}
{{- fail (printf "online.cache.mode %q: fresh, cached or auto" (toString $o.cache.mode)) }}
{{- end }}
{{- if not (has $o.features.kind (list "none" "feast" "redis")) }}
{{- fail (printf "online.features.kind %q: none, feast or redis" (toString $o.features.kind)) }}
{{- end }}
{{- if and $o.enabled (not $kv.address) }}
{{- if ne $o.cache.mode "fresh" }}
{{- fail (printf "online.cache.mode %s answers from the precomputed predictions: set kv.address (and kv.passwordSecret)" $o.cache.mode) }}
{{- end }}
{{- if eq $o.features.kind "redis" }}
{{- fail "online.features.kind redis reads each entity's hash from the kv: store: set kv.address (and kv.passwordSecret)" }}
{{- end }}
{{- end }}
{{- if eq $o.features.kind "feast" }}
{{- if not $o.features.url }}
{{- fail "online.features.url is required with kind feast: the feature server's URL (http://host:6566)" }}
{{- end }}
{{- if and (not $o.features.features) (not $o.features.featureService) }}
{{- fail "online.features: kind feast needs features (view:feature references) or featureService" }}
{{- end }}
{{- end }}
{{- if and .Values.jobs.enabled (not $kv.address) }}
{{- range $kind := list "scheduled" "triggered" }}
{{- range $i, $job := index $.Values.jobs $kind }}
{{- if and (kindIs "map" $job) (kindIs "map" $job.spec) (kindIs "map" $job.spec.target) (hasKey $job.spec.target "kv") }}
{{- fail (printf "jobs.%s[%d].spec.target.kv writes into the kv: store: set kv.address (and kv.passwordSecret)" $kind $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
