#!/bin/bash
# The engines image's entrypoint for Spark on Kubernetes (Dockerfile.engines, target spark): Spark's
# Kubernetes backend starts its driver pod with the arguments `driver ...` and each executor pod
# with `executor` (the executor's settings in SPARK_* variables), as Spark's own image entrypoint
# does; any other command (spark-submit, streamer, bash) runs as given. SPARK_HOME is pyspark's
# folder: its bin/spark-submit and its jars/, where the image puts Iceberg's jars beside Spark's.
set -euo pipefail

SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${SPARK_CONF_DIR:-}" ]; then
  SPARK_CLASSPATH="${SPARK_CONF_DIR}:${SPARK_CLASSPATH}"
fi
SPARK_CLASSPATH="${SPARK_CLASSPATH}:${PWD}"
JAVA="${JAVA_HOME:+${JAVA_HOME}/bin/}java"
# Every SPARK_JAVA_OPT_<n> that Spark sets for an executor, in order.
JAVA_OPTS=()
while IFS= read -r name; do
  JAVA_OPTS+=("${!name}")
done < <(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4 -n)
# tini reaps the Python workers that the driver and executors start.
INIT=(tini -s --)

case "${1:-}" in
  driver)
    shift
    exec "${INIT[@]}" "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    exec "${INIT[@]}" "${JAVA}" "${JAVA_OPTS[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
