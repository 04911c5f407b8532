{{- define "vllm.labels" -}}
app.kubernetes.io/name: vllm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: ml-platform
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* The pods that serve HTTP: a single-host group's one pod, a multi-host group's leader. */}}
{{- define "vllm.serverSelector" -}}
app.kubernetes.io/name: vllm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "vllm.epp" -}}
{{ .Release.Name | trunc 40 | trimSuffix "-" }}-epp
{{- end -}}

{{- /* A pod of the group: `role` is server, leader or worker. */}}
{{- define "vllm.pod" -}}
{{- $v := .root.Values -}}
metadata:
  labels:
    app.kubernetes.io/name: vllm
    app.kubernetes.io/instance: {{ .root.Release.Name }}
    {{- if ne .role "worker" }}
    app.kubernetes.io/component: server
    {{- else }}
    app.kubernetes.io/component: worker
    {{- end }}
  annotations:
    gke-gcsfuse/volumes: "true"
    # The FUSE sidecar serves the compilation cache (and the adapters, read-only): unthrottled, as the GKE guides set it.
    gke-gcsfuse/cpu-limit: "0"
    gke-gcsfuse/memory-limit: "0"
    gke-gcsfuse/ephemeral-storage-limit: "0"
spec:
  serviceAccountName: {{ $v.serviceAccountName }}
  # The FUSE driver gives the XLA cache mount to this group (fsGroup delegation: gid, file-mode 664,
  # dir-mode 775); without it the mount is root's 0755 and vLLM's `mkdir -p $VLLM_XLA_CACHE_PATH` fails.
  securityContext:
    fsGroup: {{ $v.runAs.gid }}
  nodeSelector:
    {{- toYaml $v.nodeSelector | nindent 4 }}
  {{- with $v.groupPools }}
  # Any of the slice's pools, each a whole slice; the LeaderWorkerSet's exclusive placement puts one group on
  # each (the leader's pool, then its workers on the leader's pool).
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: cloud.google.com/gke-nodepool
                operator: In
                values:
                  {{- toYaml . | nindent 18 }}
  {{- end }}
  {{- with $v.tolerations }}
  # The slice's ComputeClass taint (GKE's admission adds it to Pods that select the class; written out so the
  # Pods do not rest on that).
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: vllm
      image: {{ $v.image }}
      securityContext:
        runAsUser: {{ $v.runAs.uid }}
        runAsGroup: {{ $v.runAs.gid }}
      command: ["bash", "/platform/serve.sh"]
      args:
        - {{ .role }}
        {{- if ne .role "worker" }}
        {{- toYaml $v.args | nindent 8 }}
        {{- with $v.loraModules }}
        # One flag, every adapter after it (a second --lora-modules would replace the first).
        - --lora-modules
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- end }}
      env:
        # Where this host stands in its group (labels the LeaderWorkerSet sets on each pod).
        - name: PLATFORM_GROUP
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/group-index']
        - name: PLATFORM_HOST
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']
        # tpu-inference sets jax_compilation_cache_dir to it: persistent, and one writer per path (this
        # host of this group), so a restart loads compiled programs instead of compiling again.
        - name: VLLM_XLA_CACHE_PATH
          value: "{{ $v.xlaCacheMount }}/group-$(PLATFORM_GROUP)/host-$(PLATFORM_HOST)"
        - name: VLLM_CONFIG_ROOT
          value: /tmp/vllm-config
        - name: RAY_JOIN_TIMEOUT_S
          value: {{ $v.rayJoinTimeoutSeconds | quote }}
        {{- range $name, $value := $v.multiHostEnv }}
        - name: {{ $name }}
          value: {{ $value | quote }}
        {{- end }}
        {{- if and $v.apiKeySecret (ne .role "worker") }}
        - name: VLLM_API_KEY
          valueFrom:
            secretKeyRef:
              name: {{ $v.apiKeySecret }}
              key: token
        {{- end }}
      {{- if ne .role "worker" }}
      ports:
        - containerPort: {{ $v.port }}
          name: http
        {{- if eq .role "leader" }}
        - containerPort: 6379
          name: ray
        {{- end }}
      # /health is not behind the API key. A cold start streams the weights and compiles from nothing:
      # about 30 min for a 70B model on v6e (tpu-inference PR #3408 raised its cold-start timeout to 2400 s):
      # {{ $v.startupBudgetSeconds }} s allowed.
      startupProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: 30
        failureThreshold: {{ div $v.startupBudgetSeconds 30 }}
      readinessProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: 10
      livenessProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: 30
      {{- else }}
      ports:
        - containerPort: 6379
          name: ray
      {{- end }}
      resources:
        requests:
          google.com/tpu: {{ $v.chipsPerHost | quote }}
        limits:
          google.com/tpu: {{ $v.chipsPerHost | quote }}
      volumeMounts:
        - name: platform
          mountPath: /platform
          readOnly: true
        - name: xla-cache
          mountPath: {{ $v.xlaCacheMount }}
        {{- if $v.loraModules }}
        # The adapters, on every host of the group (each host's workers load them).
        - name: adapters
          mountPath: {{ $v.adapters.mount }}
          readOnly: true
        {{- end }}
        - name: dshm
          mountPath: /dev/shm
  volumes:
    - name: platform
      configMap:
        name: {{ .root.Release.Name }}
    - name: xla-cache
      csi:
        driver: gcsfuse.csi.storage.gke.io
        volumeAttributes:
          bucketName: {{ $v.xlaCache.bucket | quote }}
          # Owned by the server's user as well, whether or not the driver applies the fsGroup.
          mountOptions: "implicit-dirs,only-dir={{ $v.xlaCache.path }},uid={{ $v.runAs.uid }},gid={{ $v.runAs.gid }},file-mode=664,dir-mode=775"
    - name: dshm
      emptyDir:
        medium: Memory
    {{- if $v.loraModules }}
    - name: adapters
      csi:
        driver: gcsfuse.csi.storage.gke.io
        readOnly: true
        volumeAttributes:
          bucketName: {{ $v.adapters.bucket | quote }}
          mountOptions: "implicit-dirs,only-dir={{ $v.adapters.dir }}"
    {{- end }}
{{- end -}}
