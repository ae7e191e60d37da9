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
