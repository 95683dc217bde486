#!/usr/bin/env bash
# Container entrypoint (run under tini).
#
#   executor   Spark on Kubernetes starts executor pods from the driver's image with the single argument
#              "executor" and everything else in SPARK_* variables (the contract of Spark's own
#              kubernetes/dockerfiles/spark/entrypoint.sh); start the executor JVM from them.
#   *          python -m connector "$@"   (default CMD: run --config /etc/connector/config.yaml)
set -euo pipefail

if [[ "${1:-}" != executor ]]; then
  exec python -m connector "$@"
fi

: "${JAVA_HOME:?}" "${SPARK_HOME:?}"
classpath="${SPARK_HOME}/jars/*"
if [[ -n "${CONNECTOR_SPARK_JARS_DIR:-}" ]]; then classpath+=":${CONNECTOR_SPARK_JARS_DIR}/*"; fi
if [[ -n "${SPARK_EXTRA_CLASSPATH:-}" ]]; then classpath+=":${SPARK_EXTRA_CLASSPATH}"; fi
if [[ -n "${HADOOP_CONF_DIR:-}" ]]; then classpath="${HADOOP_CONF_DIR}:${classpath}"; fi

# JVM options arrive as SPARK_JAVA_OPT_0 .. SPARK_JAVA_OPT_n and must keep that order.
java_opts=()
while read -r name; do
  java_opts+=("${!name}")
done < <(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4 -n)

exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
  "-Xms${SPARK_EXECUTOR_MEMORY:?}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
  -cp "${classpath}" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "${SPARK_DRIVER_URL:?}" \
  --executor-id "${SPARK_EXECUTOR_ID:?}" \
  --cores "${SPARK_EXECUTOR_CORES:?}" \
  --app-id "${SPARK_APPLICATION_ID:?}" \
  --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
  --podName "${SPARK_EXECUTOR_POD_NAME:?}"
