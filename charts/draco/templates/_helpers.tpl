{{/* Prefix of every object name: the release name unless overridden. */}}
{{- define "draco.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "draco.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "draco.labels" -}}
app.kubernetes.io/part-of: draco
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: (list $ "operator"). */}}
{{- define "draco.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: draco-{{ index . 1 }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- end -}}

{{- define "draco.operatorSA" -}}{{ include "draco.fullname" . }}-operator{{- end -}}
{{- define "draco.webhookSA" -}}{{ include "draco.fullname" . }}-webhook{{- end -}}
{{- define "draco.agentSA" -}}{{ include "draco.fullname" . }}-agent{{- end -}}
{{- define "draco.lease" -}}{{ include "draco.fullname" . }}-operator{{- end -}}

{{/* Pod and container security for the operator and webhook: non-root, read-only. */}}
{{- define "draco.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "draco.containerSecurity" -}}
{{ toYaml .Values.containerSecurityContext }}
{{- end -}}

{{- define "draco.globalArgs" -}}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end -}}

{{/* A webhook's clientConfig: (list $ path caBundle); no caBundle with cert-manager. */}}
{{- define "draco.clientConfig" -}}
{{- $ := index . 0 -}}
{{- with index . 2 }}caBundle: {{ . }}
{{ end -}}
service:
  namespace: {{ $.Release.Namespace }}
  name: {{ include "draco.webhookSA" $ }}
  path: {{ index . 1 }}
  port: 443
{{- end -}}

{{/* A Deployment's replicas spread over nodes: (list $ component). */}}
{{- define "draco.spread" -}}
{{- $ := index . 0 -}}
{{- $values := index $.Values (index . 1) -}}
{{- if $values.topologySpread -}}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: {{ $values.topologySpread }}
  labelSelector:
    matchLabels: {{- include "draco.selector" . | nindent 6 }}
  matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end -}}

{{/* The driver names the agent publishes (JSON list): the fake driver's from its device
file, the nvidia driver's (NVIDIA's own name with nvidiaCompat). The slice policy allows
no other. */}}
{{- define "draco.agentDrivers" -}}
{{- $a := .Values.agent -}}
{{- $names := list -}}
{{- if has "fake" $a.drivers -}}
{{- range $a.fakeDevices.drivers }}{{ $names = append $names .name }}{{ end -}}
{{- end -}}
{{- if has "nvidia" $a.drivers -}}
{{- $names = append $names (ternary "gpu.nvidia.com" "gpu.nvidia.draco.dev" $a.nvidiaCompat) -}}
{{- end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{/* A process's metrics flags: (list $ port). With metrics.secure (the default) HTTPS on
every address, to callers the API server authenticates and authorizes for get on /metrics;
without it plain HTTP on 127.0.0.1, for a proxy of your own in the pod. */}}
{{- define "draco.metricsArgs" -}}
{{- $ := index . 0 -}}
- --metrics-port={{ index . 1 }}
{{- if $.Values.metrics.secure }}
- --metrics-secure
{{- end }}
{{- end -}}

{{/* The RBAC rules a process needs to ask the API server who may read its /metrics
(TokenReview, SubjectAccessReview: what the system:auth-delegator ClusterRole grants). */}}
{{- define "draco.metricsAuthRules" -}}
{{- if .Values.metrics.secure }}
# /metrics answers only callers the API server vouches for: their token reviewed, their
# get on /metrics checked (docs/install.md#metrics).
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}
{{- end -}}
