{{- define "ray-training.labels" -}}
app.kubernetes.io/name: kuberay
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "ray-training.volumes" -}}
- name: checkpoints
  csi:
    driver: gcsfuse.csi.storage.gke.io
    volumeAttributes:
      bucketName: {{ .Values.checkpoints.bucket | quote }}
      mountOptions: "implicit-dirs,file-cache:enable-parallel-downloads:true"
- name: dshm
  emptyDir:
    medium: Memory
    {{- with .Values.worker.sharedMemory }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end -}}

{{- define "ray-training.mounts" -}}
- name: checkpoints
  mountPath: {{ .Values.checkpoints.mountPath }}
- name: dshm
  mountPath: /dev/shm
{{- end -}}
