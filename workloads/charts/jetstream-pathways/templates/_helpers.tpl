{{- define "jetstream.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* Where a worker runs: a TPU host of one of the deployment's pools. */}}
{{- define "jetstream.placement" -}}
nodeSelector:
  {{- toYaml .Values.nodeSelector | nindent 2 }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - key: cloud.google.com/gke-nodepool
              operator: In
              values:
                {{- toYaml .Values.nodePools | nindent 16 }}
tolerations:
  - key: google.com/tpu
    operator: Exists
    effect: NoSchedule
{{- end -}}

{{- define "jetstream.worker" -}}
- name: pathways-worker
  image: {{ .Values.images.pathwaysServer }}
  args:
    - --server_port=38679
    - --resource_manager_address=$(LWS_LEADER_ADDRESS):38677
    - --gcs_scratch_location={{ .Values.scratch }}
  ports:
    - containerPort: 38679
  resources:
    requests:
      google.com/tpu: {{ .Values.chipsPerHost | quote }}
    limits:
      google.com/tpu: {{ .Values.chipsPerHost | quote }}
{{- end -}}
