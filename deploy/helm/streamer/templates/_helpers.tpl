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
