{{- define "saxml.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "saxml.root" -}}
gs://{{ .Values.bucket }}/sax-root
{{- end -}}
