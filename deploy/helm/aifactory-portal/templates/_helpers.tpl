{{- define "portal.name" -}}aifactory-portal{{- end -}}

{{- define "portal.fullname" -}}
{{- if contains "aifactory-portal" .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-aifactory-portal" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "portal.labels" -}}
app.kubernetes.io/name: aifactory-portal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "portal.selector" -}}
app.kubernetes.io/name: aifactory-portal
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "portal.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- define "portal.secretName" -}}{{ .Values.existingSecret | default (printf "%s-env" (include "portal.fullname" .)) }}{{- end -}}

{{/* Restricted Pod Security: non-root, no privilege escalation, read-only root, no caps. */}}
{{- define "portal.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "portal.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{- define "portal.env" -}}
envFrom:
  - configMapRef: {name: {{ include "portal.fullname" . }}-settings}
  - secretRef: {name: {{ include "portal.secretName" . }}}
{{- end -}}

{{- define "portal.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.affinity }}
affinity: {{- toYaml .Values.affinity | nindent 2 }}
{{- else if and .spread (ne .spreadMode "none") }}
affinity:
  podAntiAffinity:
    {{- if eq .spreadMode "hard" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {{- include "portal.selector" . | nindent 12 }}
            app.kubernetes.io/component: {{ .spread }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {{- include "portal.selector" . | nindent 14 }}
              app.kubernetes.io/component: {{ .spread }}
    {{- end }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}


{{/* kube-score's image-pull-policy check, answered: tags are pinned and images immutable,
and the portal runs on networks where the registry may be away; IfNotPresent lets pods
restart without it (set image.pullPolicy=Always where every start must re-validate
imagePullSecrets). */}}
{{- define "portal.scoreAnnotations" -}}
kube-score/ignore: container-image-pull-policy
{{- end -}}
