{{- define "ray-training.labels" -}}
{{ include "ray-training.podLabels" . }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* The pods' labels: not the chart's version. The RayCluster is named after its spec (raycluster.yaml), pods
  included, so a version in them made every chart bump a new cluster and a training restart, even one that left the
  cluster as it was. */}}
{{- define "ray-training.podLabels" -}}
app.kubernetes.io/name: kuberay
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
{{- end -}}

{{- define "ray-training.volumes" -}}
- name: checkpoints
  csi:
    driver: gcsfuse.csi.storage.gke.io
    volumeAttributes:
      bucketName: {{ .Values.checkpoints.bucket | quote }}
      # As the GKE tutorial mounts it. Parallel downloads would need a file cache
      # (refused at mount since GKE 1.32.0-gke.1795000), and checkpoints are written
      # and read once, so a cache buys nothing here.
      # Owned by the image's user (uid, gid, group-writable modes): the mount is root's 0755 otherwise
      # and the trainer (uid 1000) cannot write a checkpoint.
      mountOptions: "implicit-dirs,uid={{ .Values.runAs.uid }},gid={{ .Values.runAs.gid }},file-mode=664,dir-mode=775"
- name: dshm
  emptyDir:
    medium: Memory
    {{- with .Values.worker.sharedMemory }}
    sizeLimit: {{ . }}
    {{- end }}
{{- end -}}

{{- /* The Cloud Storage FUSE sidecar, injected by GKE, with the tutorial's limits: none
  (its defaults throttle checkpoint reads and writes of a multi-GB state). */}}
{{- define "ray-training.annotations" -}}
gke-gcsfuse/volumes: "true"
gke-gcsfuse/cpu-limit: "0"
gke-gcsfuse/memory-limit: "0"
gke-gcsfuse/ephemeral-storage-limit: "0"
{{- end -}}

{{- /* Who the head and the workers run as: the image's user, and its group owns the pod's volumes
  (fsGroup: the FUSE driver mounts with gid=fsGroup, file-mode 664, dir-mode 775). */}}
{{- define "ray-training.podSecurityContext" -}}
fsGroup: {{ .Values.runAs.gid }}
{{- end -}}

{{- define "ray-training.securityContext" -}}
runAsUser: {{ .Values.runAs.uid }}
runAsGroup: {{ .Values.runAs.gid }}
{{- end -}}

{{- define "ray-training.mounts" -}}
- name: checkpoints
  mountPath: {{ .Values.checkpoints.mountPath }}
- name: dshm
  mountPath: /dev/shm
{{- end -}}
