{{/* Names: 63 characters max; the StatefulSet pod is <fullname>-0. */}}
{{- define "dfm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dfm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dfm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dfm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dfm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dfm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: debezium-fabric-mirror
{{- end -}}

{{- define "dfm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dfm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "dfm.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The connector pod only: executor pods carry the selector labels too (component spark-executor). */}}
{{- define "dfm.driverSelectorLabels" -}}
{{ include "dfm.selectorLabels" . }}
app.kubernetes.io/component: driver
{{- end -}}

{{- define "dfm.headlessService" -}}
{{- printf "%s-headless" (include "dfm.fullname" .) -}}
{{- end -}}

{{- define "dfm.configDir" -}}/etc/connector/config{{- end -}}
{{- define "dfm.azureCertDir" -}}/etc/connector/secrets/azure{{- end -}}
{{- define "dfm.kafkaCaDir" -}}/etc/connector/secrets/kafka-ca{{- end -}}
{{- define "dfm.kafkaKeystoreDir" -}}/etc/connector/secrets/kafka-keystore{{- end -}}
{{- define "dfm.dataDir" -}}/data{{- end -}}
{{- /* Create mode (init.name): the init container writes the config `run` reads here (an emptyDir). */ -}}
{{- define "dfm.initConfigDir" -}}/etc/connector/init{{- end -}}
{{- define "dfm.creates" -}}{{- if and .Values.init.enabled .Values.init.name -}}true{{- end -}}{{- end -}}
{{- define "dfm.runConfig" -}}
{{- if include "dfm.creates" . -}}{{ include "dfm.initConfigDir" . }}/config.yaml{{- else -}}{{ include "dfm.configDir" . }}/config.yaml{{- end -}}
{{- end -}}
{{- define "dfm.sparkAuthDir" -}}/etc/connector/secrets/spark-auth{{- end -}}
{{- /* Executors' working directory: Spark copies every spark.jars entry into it, so it must be writable. */ -}}
{{- define "dfm.executorWorkDir" -}}/opt/connector/work{{- end -}}

{{- define "dfm.saslLoginModule" -}}
{{- if eq .Values.kafka.security.sasl.mechanism "PLAIN" -}}
org.apache.kafka.common.security.plain.PlainLoginModule
{{- else -}}
org.apache.kafka.common.security.scram.ScramLoginModule
{{- end -}}
{{- end -}}

{{/* SASL with a user and password (PLAIN, SCRAM); Entra ID tokens need no secret. */}}
{{- define "dfm.usesSasl" -}}
{{- if and (hasPrefix "SASL_" .Values.kafka.security.protocol) (not .Values.kafka.security.entra.enabled) }}true{{ end -}}
{{- end -}}

{{/* Kafka's Entra ID identity is a workload identity (its own, or the identity section's). */}}
{{- define "dfm.kafkaWorkloadIdentity" -}}
{{- $e := .Values.kafka.security.entra -}}
{{- if and $e.enabled (or (eq $e.identity "workloadIdentity") (and (eq $e.identity "sameAsOneLake") (eq .Values.identity.type "workloadIdentity"))) }}true{{ end -}}
{{- end -}}

{{/* Some identity of the pods is a workload identity: the pods get the webhook's label, the ServiceAccount its client id. */}}
{{- define "dfm.usesWorkloadIdentity" -}}
{{- if or (eq .Values.identity.type "workloadIdentity") (include "dfm.kafkaWorkloadIdentity" .) }}true{{ end -}}
{{- end -}}

{{/* source.kafka_auth: the Entra identity (the identity section's kind, or its own kind and client id) and scope. */}}
{{- define "dfm.kafkaAuth" -}}
{{- $e := .Values.kafka.security.entra -}}
{{- $credential := include "dfm.credential" . -}}
{{- if ne $e.identity "sameAsOneLake" }}
{{- $kinds := dict "workloadIdentity" "workload_identity" "managedIdentity" "managed_identity" -}}
{{- $own := dict "kind" (get $kinds $e.identity) -}}
{{- with $e.clientId }}{{- $_ := set $own "client_id" . -}}{{- end }}
{{- if and (eq $e.identity "workloadIdentity") (eq .Values.identity.type "workloadIdentity") .Values.identity.workloadIdentity.tenantId }}
{{- $_ := set $own "tenant_id" .Values.identity.workloadIdentity.tenantId -}}
{{- end }}
{{- $credential = $own -}}
{{- end }}
{{- $auth := dict "kind" "entra" "credential" $credential -}}
{{- with $e.scope }}{{- $_ := set $auth "scope" . -}}{{- end }}
{{- toJson $auth -}}
{{- end -}}

{{- define "dfm.usesTls" -}}
{{- if has .Values.kafka.security.protocol (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{/*
Environment shared by the driver container and (in k8s mode) the executor pod template.
Secrets only ever appear as secretKeyRef; KAFKA_SASL_JAAS_CONFIG built here holds a $(KAFKA_SASL_PASSWORD)
reference that the kubelet expands, never the password itself.
*/}}
{{- define "dfm.env" -}}
- name: HOME
  value: /tmp
{{- $id := .Values.identity }}
{{- $sp := $id.servicePrincipal }}
{{- if eq $id.type "managedIdentity" }}
{{- with $id.managedIdentity.clientId }}
- name: AZURE_CLIENT_ID
  value: {{ . | quote }}
{{- end }}
{{- else if has $id.type (list "servicePrincipalSecret" "servicePrincipalCertificate") }}
- name: AZURE_CLIENT_ID
  valueFrom:
    secretKeyRef:
      name: {{ $sp.existingSecret }}
      key: {{ $sp.clientIdKey }}
- name: AZURE_TENANT_ID
  valueFrom:
    secretKeyRef:
      name: {{ $sp.existingSecret }}
      key: {{ $sp.tenantIdKey }}
{{- if eq $id.type "servicePrincipalSecret" }}
- name: AZURE_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $sp.existingSecret }}
      key: {{ $sp.clientSecretKey }}
{{- else }}
- name: AZURE_CLIENT_CERTIFICATE_PATH
  value: {{ printf "%s/%s" (include "dfm.azureCertDir" .) $sp.certificateKey | quote }}
{{- with $sp.certificatePasswordKey }}
- name: AZURE_CLIENT_CERTIFICATE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sp.existingSecret }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- $sasl := .Values.kafka.security.sasl }}
{{- if include "dfm.usesSasl" . }}
{{- if $sasl.jaasConfigSecret.name }}
- name: KAFKA_SASL_JAAS_CONFIG
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.jaasConfigSecret.name }}
      key: {{ $sasl.jaasConfigSecret.key }}
{{- else }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.passwordSecret.name }}
      key: {{ $sasl.passwordSecret.key }}
- name: KAFKA_SASL_JAAS_CONFIG
  value: {{ printf "%s required username=\"%s\" password=\"$(KAFKA_SASL_PASSWORD)\";" (include "dfm.saslLoginModule" .) $sasl.username | quote }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Secret-backed volumes and their mounts, shared by the driver and the executors. */}}
{{- define "dfm.secretVolumes" -}}
{{- $sp := .Values.identity.servicePrincipal }}
{{- if eq .Values.spark.mode "k8s" }}
- name: spark-auth
  secret:
    secretName: {{ .Values.spark.k8s.authSecret.name }}
    defaultMode: 0440
    items:
      - key: {{ .Values.spark.k8s.authSecret.key }}
        path: {{ .Values.spark.k8s.authSecret.key }}
{{- end }}
{{- if eq .Values.identity.type "servicePrincipalCertificate" }}
- name: azure-certificate
  secret:
    secretName: {{ $sp.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $sp.certificateKey }}
        path: {{ $sp.certificateKey }}
{{- end }}
{{- $tls := .Values.kafka.security.tls }}
{{- if and (include "dfm.usesTls" .) $tls.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ $tls.caSecret.name }}
    defaultMode: 0444
    items:
      - key: {{ $tls.caSecret.key }}
        path: {{ $tls.caSecret.key }}
{{- end }}
{{- if and (include "dfm.usesTls" .) $tls.keystoreSecret.name }}
- name: kafka-keystore
  secret:
    secretName: {{ $tls.keystoreSecret.name }}
    defaultMode: 0440
    items:
      - key: {{ $tls.keystoreSecret.key }}
        path: {{ $tls.keystoreSecret.key }}
{{- end }}
{{- end -}}

{{- define "dfm.secretVolumeMounts" -}}
{{- if eq .Values.spark.mode "k8s" }}
- name: spark-auth
  mountPath: {{ include "dfm.sparkAuthDir" . }}
  readOnly: true
{{- end }}
{{- if eq .Values.identity.type "servicePrincipalCertificate" }}
- name: azure-certificate
  mountPath: {{ include "dfm.azureCertDir" . }}
  readOnly: true
{{- end }}
{{- $tls := .Values.kafka.security.tls }}
{{- if and (include "dfm.usesTls" .) $tls.caSecret.name }}
- name: kafka-ca
  mountPath: {{ include "dfm.kafkaCaDir" . }}
  readOnly: true
{{- end }}
{{- if and (include "dfm.usesTls" .) $tls.keystoreSecret.name }}
- name: kafka-keystore
  mountPath: {{ include "dfm.kafkaKeystoreDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "dfm.credential" -}}
{{- $map := dict "default" "default" "workloadIdentity" "workload_identity" "managedIdentity" "managed_identity" "servicePrincipalSecret" "client_secret" "servicePrincipalCertificate" "client_certificate" -}}
{{- get $map .Values.identity.type -}}
{{- end -}}

{{- define "dfm.automountToken" -}}
{{- if kindIs "bool" .Values.serviceAccount.automountToken -}}
{{- .Values.serviceAccount.automountToken -}}
{{- else -}}
{{- eq .Values.spark.mode "k8s" -}}
{{- end -}}
{{- end -}}

{{/* A scalar value as a string; whole numbers without exponent (YAML numbers reach templates as float64). */}}
{{- define "dfm.scalarString" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* The connector's config.yaml (contract: connector/config.py). */}}
{{- define "dfm.config" -}}
{{- $k := .Values.kafka -}}
{{- $sec := $k.security -}}
{{- $opts := dict -}}
{{- range $key, $value := $k.options }}
{{- $_ := set $opts $key (include "dfm.scalarString" $value) -}}
{{- end }}
{{- if ne $sec.protocol "PLAINTEXT" }}
{{- $_ := set $opts "security.protocol" $sec.protocol -}}
{{- end }}
{{- if include "dfm.usesSasl" . }}
{{- $_ := set $opts "sasl.mechanism" $sec.sasl.mechanism -}}
{{- $_ := set $opts "sasl.jaas.config" "${env:KAFKA_SASL_JAAS_CONFIG}" -}}
{{- end }}
{{- if and (include "dfm.usesTls" .) $sec.tls.caSecret.name }}
{{- $_ := set $opts "ssl.truststore.type" "PEM" -}}
{{- $_ := set $opts "ssl.truststore.location" (printf "%s/%s" (include "dfm.kafkaCaDir" .) $sec.tls.caSecret.key) -}}
{{- end }}
{{- if and (include "dfm.usesTls" .) $sec.tls.keystoreSecret.name }}
{{- $_ := set $opts "ssl.keystore.type" "PEM" -}}
{{- $_ := set $opts "ssl.keystore.location" (printf "%s/%s" (include "dfm.kafkaKeystoreDir" .) $sec.tls.keystoreSecret.key) -}}
{{- end }}
{{- $source := dict "kind" "kafka" "bootstrap_servers" $k.bootstrapServers "topics" $k.topics "starting_offsets" $k.startingOffsets "max_offsets_per_trigger" (int64 $k.maxOffsetsPerTrigger) "kafka_options" $opts -}}
{{- with $k.maxRecordsPerTask }}
{{- $_ := set $source "max_records_per_partition" (int64 .) -}}
{{- end }}
{{- if $sec.entra.enabled }}
{{- $_ := set $source "kafka_auth" (include "dfm.kafkaAuth" . | fromJson) -}}
{{- end }}
{{- if .Values.debezium.connectUrl }}
{{- $_ := set $source "debezium_connect_url" .Values.debezium.connectUrl -}}
{{- $_ := set $source "debezium_connectors" .Values.debezium.connectors -}}
{{- $_ := set $source "debezium_status_poll_s" .Values.debezium.statusPollSeconds -}}
{{- end }}
{{- $checkpoint := printf "%s/checkpoint" (include "dfm.dataDir" .) -}}
{{- $conf := dict "spark.driver.memory" .Values.spark.driver.memory -}}
{{- $master := .Values.spark.local.master -}}
{{- if eq .Values.spark.mode "k8s" }}
{{- $master = "k8s://https://kubernetes.default.svc" -}}
{{- $e := .Values.spark.k8s.executor -}}
{{- $fullname := include "dfm.fullname" . -}}
{{- $_ := set $conf "spark.submit.deployMode" "client" -}}
{{- $_ := set $conf "spark.kubernetes.namespace" .Release.Namespace -}}
{{- $_ := set $conf "spark.kubernetes.container.image" (include "dfm.image" .) -}}
{{- $_ := set $conf "spark.kubernetes.container.image.pullPolicy" .Values.image.pullPolicy -}}
{{- with .Values.imagePullSecrets }}
{{- $names := list -}}
{{- range . }}{{ $names = append $names .name }}{{ end -}}
{{- $_ := set $conf "spark.kubernetes.container.image.pullSecrets" (join "," $names) -}}
{{- end }}
{{- $_ := set $conf "spark.kubernetes.driver.pod.name" (printf "%s-0" $fullname) -}}
{{- /* Spark requires a DNS label of at most 47 characters. */ -}}
{{- $_ := set $conf "spark.kubernetes.executor.podNamePrefix" ($fullname | trunc 47 | trimSuffix "-") -}}
{{- $_ := set $conf "spark.kubernetes.authenticate.executor.serviceAccountName" (include "dfm.serviceAccountName" .) -}}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateFile" (printf "%s/executor-pod-template.yaml" (include "dfm.configDir" .)) -}}
{{- $_ := set $conf "spark.kubernetes.executor.podTemplateContainerName" "executor" -}}
{{- $_ := set $conf "spark.kubernetes.executor.deleteOnTermination" "true" -}}
{{- $_ := set $conf "spark.kubernetes.executor.request.cores" (toString $e.cores) -}}
{{- $_ := set $conf "spark.executor.instances" (toString (int64 $e.instances)) -}}
{{- $_ := set $conf "spark.executor.cores" (toString (int64 $e.cores)) -}}
{{- $_ := set $conf "spark.executor.memory" $e.memory -}}
{{- $_ := set $conf "spark.driver.host" (printf "%s.%s.svc" (include "dfm.headlessService" .) .Release.Namespace) -}}
{{- $_ := set $conf "spark.driver.bindAddress" "0.0.0.0" -}}
{{- $_ := set $conf "spark.driver.port" (toString (int64 .Values.spark.k8s.driverPort)) -}}
{{- $_ := set $conf "spark.driver.blockManager.port" (toString (int64 .Values.spark.k8s.blockManagerPort)) -}}
{{- /* Driver and executors prove the release's key to each other (a file from the Secret, so Spark puts no
     SPARK_AUTH_SECRET value into the executor pod spec), then encrypt RPC, block transfers and local files. */ -}}
{{- $authFile := printf "%s/%s" (include "dfm.sparkAuthDir" .) .Values.spark.k8s.authSecret.key -}}
{{- $_ := set $conf "spark.authenticate" "true" -}}
{{- $_ := set $conf "spark.authenticate.secret.driver.file" $authFile -}}
{{- $_ := set $conf "spark.authenticate.secret.executor.file" $authFile -}}
{{- $_ := set $conf "spark.network.crypto.enabled" "true" -}}
{{- $_ := set $conf "spark.io.encryption.enabled" "true" -}}
{{- end }}
{{- range $key, $value := .Values.spark.conf }}
{{- $_ := set $conf $key (include "dfm.scalarString" $value) -}}
{{- end }}
{{- $m := .Values.mirror -}}
{{- $landing := dict "credential" (include "dfm.credential" .) -}}
{{- with .Values.landingZone.url }}{{- $_ := set $landing "url" . -}}{{- end }}
{{- $config := dict
  "source" $source
  "landing_zone" $landing
  "checkpoint" $checkpoint
  "trigger" .Values.trigger
  "metrics" (dict "port" (int64 .Values.metrics.port) "status_page" (ne (toString .Values.metrics.statusPage) "false"))
  "spark" (dict "master" $master "conf" $conf "decode_on" .Values.spark.decodeOn)
  "mirror" (dict "partner_name" $m.partnerName "replay_safe_inserts" $m.replaySafeInserts "initial_load" ($m.initialLoad | default "marker-free") "truncate_policy" $m.truncatePolicy "toast_policy" $m.toastPolicy "file_format" $m.fileFormat "on_table_stopped" $m.onTableStopped "rebuild" (dict "wait_s" $m.rebuildWaitSeconds))
-}}
{{- $fs := .Values.fabricStatus -}}
{{- if ne $fs.kind "none" }}
{{- $fabric := dict "kind" $fs.kind "credential" (include "dfm.credential" .) "poll_s" $fs.pollSeconds -}}
{{- if eq $fs.kind "rest" }}
{{- $_ := set $fabric "workspace_id" $fs.workspaceId -}}
{{- with $fs.mirroredDatabaseId }}{{- $_ := set $fabric "mirrored_database_id" . -}}{{- end }}
{{- $_ := set $fabric "api_url" $fs.apiUrl -}}
{{- if $fs.bearerTokenSecret.name }}
{{- $_ := set $fabric "bearer_token" "${env:FABRIC_STATUS_BEARER_TOKEN}" -}}
{{- end }}
{{- else if $fs.monitoringUrl }}
{{- $_ := set $fabric "monitoring_url" $fs.monitoringUrl -}}
{{- end }}
{{- $_ := set $config "fabric_status" $fabric -}}
{{- end }}
{{- toYaml $config -}}
{{- end -}}
