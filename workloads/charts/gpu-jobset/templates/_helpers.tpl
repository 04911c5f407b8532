{{- /* The JobSet's name changes with any value, so a change runs a new JobSet
  instead of patching the immutable pod template of one that ran. */}}
{{- define "gpu-jobset.name" -}}
{{ .Release.Name }}-{{ .Values | toJson | sha256sum | trunc 8 }}
{{- end -}}

{{- define "gpu-jobset.labels" -}}
app.kubernetes.io/name: {{ .Values.workload }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* Stable DNS names of the pods, index 0 first: <jobset>-node-0-<i>.<jobset>. */}}
{{- define "gpu-jobset.hosts" -}}
{{- $name := include "gpu-jobset.name" . -}}
{{- range $i := until (int .Values.nodes) }}{{ if $i }} {{ end }}{{ $name }}-node-0-{{ $i }}.{{ $name }}{{ end -}}
{{- end -}}

{{- define "gpu-jobset.annotations" -}}
{{- with .Values.gpudirect }}
networking.gke.io/default-interface: eth0
networking.gke.io/interfaces: |
  {{- $nics := list (dict "interfaceName" "eth0" "network" "default") }}
  {{- range $i, $net := .networks }}
  {{- $nics = append $nics (dict "interfaceName" (printf "eth%d" (add1 $i)) "network" $net) }}
  {{- end }}
  {{- toJson $nics | nindent 2 }}
devices.gke.io/container.{{ .transport }}-daemon: |
  {{- range until (int $.Values.acceleratorsPerNode) }}
  - path: /dev/nvidia{{ . }}
  {{- end }}
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  {{- if eq .transport "tcpxo" }}
  - path: /dev/dmabuf_import_helper
  {{- end }}
{{- end }}
{{- end -}}

{{- /* The receive-data-path daemon, as a native sidecar: it starts before and
  stops after the main container, so a finished pod completes. */}}
{{- define "gpu-jobset.daemon" -}}
{{- with .Values.gpudirect }}
- name: {{ .transport }}-daemon
  image: {{ .daemonImage }}
  restartPolicy: Always
  {{- if eq .transport "tcpxo" }}
  command: ["/bin/sh", "-c"]
  args:
    - |
      set -ex
      chmod 755 /fts/entrypoint_rxdm_container.sh
      /fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics={{ len .networks }}
  securityContext:
    capabilities:
      add: [NET_ADMIN, NET_BIND_SERVICE]
  {{- else }}
  command:
    - /tcpgpudmarxd/build/app/tcpgpudmarxd
    - --gpu_nic_preset
    - a3vm
    - --gpu_shmem_type
    - fd
    - --uds_path
    - /run/tcpx
    - --setup_param
    - "--verbose 128 2 0"
  securityContext:
    capabilities:
      add: [NET_ADMIN]
  {{- end }}
  env:
    - name: LD_LIBRARY_PATH
      value: /usr/local/nvidia/lib64
  volumeMounts:
    - name: nvidia
      mountPath: /usr/local/nvidia/lib64
    - name: sys
      mountPath: /hostsysfs
    - name: proc-sys
      mountPath: /hostprocsysfs
    {{- if eq .transport "tcpx" }}
    - name: tcpx-socket
      mountPath: /run/tcpx
    {{- end }}
{{- end }}
{{- end -}}

{{- /* NCCL settings: the transport's, derived by the platform for a GKE pod (infra/catalogue/gpudirect.py
  nccl_env); TCPXO's main command sources the plugin's nccl-env-profile.sh for the rest. */}}
{{- define "gpu-jobset.env" -}}
- name: LD_LIBRARY_PATH
  value: /usr/local/nvidia/lib64
{{- with .Values.gpudirect }}
{{- range $name, $value := .ncclEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- else }}
- name: NCCL_LIB_DIR
  value: /usr/local/nvidia/lib64
{{- end }}
{{- end -}}

{{- define "gpu-jobset.mounts" -}}
- name: nvidia
  mountPath: /usr/local/nvidia/lib64
- name: dshm
  mountPath: /dev/shm
{{- with .Values.gpudirect }}
{{- if eq .transport "tcpxo" }}
- name: aperture-devices
  mountPath: /dev/aperture_devices
{{- else }}
- name: tcpx-socket
  mountPath: /run/tcpx
{{- end }}
{{- end }}
{{- end -}}

{{- define "gpu-jobset.volumes" -}}
- name: nvidia
  hostPath:
    path: /home/kubernetes/bin/nvidia/lib64
- name: dshm
  emptyDir:
    medium: Memory
{{- with .Values.gpudirect }}
- name: sys
  hostPath:
    path: /sys
- name: proc-sys
  hostPath:
    path: /proc/sys
{{- if eq .transport "tcpxo" }}
- name: aperture-devices
  hostPath:
    path: /dev/aperture_devices
{{- else }}
- name: tcpx-socket
  emptyDir: {}
{{- end }}
{{- end }}
{{- end -}}
