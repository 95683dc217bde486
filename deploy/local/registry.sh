#!/usr/bin/env bash
# A real schema registry for the local stack, no Docker: Apicurio Registry 2.6.13.Final from Maven Central
# (the app's published quarkus "all" assembly, fetched by fetch-jars.sh apicurio-registry), H2 storage in
# memory (default) or in a file under the state dir, listening on 127.0.0.1 only.
#
#   registry.sh start    start (or reuse) the registry; wait until its Confluent-compatible API answers;
#                        print exactly (stdout):
#                          registry.url=http://127.0.0.1:PORT
#                          schema.registry.url=http://127.0.0.1:PORT/apis/ccompat/v7
#                          apicurio.registry.url=http://127.0.0.1:PORT/apis/registry/v2
#                        schema.registry.url is the Confluent Schema Registry REST API (give it to
#                        confluent_kafka's SchemaRegistryClient: {"url": ...}); apicurio.registry.url is
#                        Apicurio's own API, the one its Kafka Connect converter talks to.
#   registry.sh stop     stop the registry started from this state dir (its pid file only)
#   registry.sh status   "running registry.url=..." (exit 0) or "stopped" (exit 1)
#   registry.sh env      print the start lines of a running registry again
#
# REGISTRY_STORAGE=memory (default): schemas (and their ids) are gone when the registry stops, so records
# already in Kafka keep ids that a new registry does not know; stop it only together with the topics it
# served. REGISTRY_STORAGE=file: H2 database files under $STATE_DIR/h2, kept across stop/start (e.g. to
# test a consumer through a registry outage: stop, then start again on the same port with the same ids).
#
# Environment (defaults): STATE_DIR (<repo>/.state/registry: pid, port, log, h2/), REGISTRY_PORT (a free
# one, kept across restarts when still free), REGISTRY_STORAGE (memory | file), REGISTRY_HEAP (384m),
# REGISTRY_START_TIMEOUT (120 seconds), JARS_DIR (<repo>/.cache/jars), JAVA (java; 11 or newer), LOCAL_JAVA_OPTS
# (more JVM options, none by default; see kafka.sh).
# Everything except the printed lines goes to stderr.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=$(realpath -m "${STATE_DIR:-$REPO_ROOT/.state/registry}")
JARS_DIR=${JARS_DIR:-$REPO_ROOT/.cache/jars}
export JARS_DIR
JAVA=${JAVA:-java}
HEAP=${REGISTRY_HEAP:-384m}
STORAGE=${REGISTRY_STORAGE:-memory}
START_TIMEOUT=${REGISTRY_START_TIMEOUT:-120}

REGISTRY_JARS=$JARS_DIR/apicurio-registry
PID_FILE=$STATE_DIR/registry.pid
PORT_FILE=$STATE_DIR/port
LOG_FILE=$STATE_DIR/registry.log
CCOMPAT_PATH=/apis/ccompat/v7
APICURIO_PATH=/apis/registry/v2
# On the command line of the process we start: how stop/status recognise it (guards against pid reuse).
MARKER=-Dlocal.registry.state=$STATE_DIR

log() { echo "registry.sh: $*" >&2; }

# shellcheck source=deploy/local/ports.sh
source "$SCRIPT_DIR/ports.sh"

running_pid() {
  [[ -f $PID_FILE ]] || return 1
  local pid cmdline
  pid=$(<"$PID_FILE")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$MARKER "* ]] || return 1
  echo "$pid"
}

runner_jar() {
  local jar
  jar=$(find "$REGISTRY_JARS" -maxdepth 1 -name 'apicurio-registry-app-*-runner.jar' 2>/dev/null | sort -V | tail -n 1)
  [[ -n $jar ]] || return 1
  echo "$jar"
}

base_url() { echo "http://127.0.0.1:$(<"$PORT_FILE")"; }

print_urls() {
  local base
  base=$(base_url)
  echo "registry.url=$base"
  echo "schema.registry.url=$base$CCOMPAT_PATH"
  echo "apicurio.registry.url=$base$APICURIO_PATH"
}

# Ready = the Confluent-compatible API and Apicurio's own API both answer.
answers() {
  local base=$1
  curl -sf -o /dev/null --max-time 5 "$base$CCOMPAT_PATH/subjects" &&
    curl -sf -o /dev/null --max-time 5 "$base$APICURIO_PATH/system/info"
}

print_log_tail() {
  if [[ -f $LOG_FILE ]]; then
    log "---- last 40 lines of $LOG_FILE ----"
    tail -n 40 "$LOG_FILE" >&2 || true
  fi
}

cmd_start() {
  local pid port jar
  if pid=$(running_pid) && [[ -f $PORT_FILE ]]; then
    if answers "$(base_url)"; then
      log "already running (pid $pid, $(base_url))"
      print_urls
      return 0
    fi
    log "pid $pid runs but $(base_url) does not answer; restarting it"
    cmd_stop
  fi
  command -v curl >/dev/null || { log "curl is required"; return 1; }
  command -v "$JAVA" >/dev/null 2>&1 || { log "java not found ($JAVA)"; return 1; }
  if [[ ! -f $REGISTRY_JARS/.complete ]]; then
    bash "$SCRIPT_DIR/fetch-jars.sh" apicurio-registry >&2
  fi
  jar=$(runner_jar) || { log "no apicurio-registry-app-*-runner.jar in $REGISTRY_JARS"; return 1; }
  mkdir -p "$STATE_DIR"
  local -a storage_opts=() local_opts
  read -r -a local_opts <<<"${LOCAL_JAVA_OPTS:-}"
  case $STORAGE in
    memory) ;; # the app's default: jdbc:h2:mem:registry_db
    file) storage_opts=("-Dquarkus.datasource.jdbc.url=jdbc:h2:file:$STATE_DIR/h2/registry") ;;
    *) log "REGISTRY_STORAGE is memory or file, got '$STORAGE'"; return 1 ;;
  esac

  if [[ -n ${REGISTRY_PORT:-} ]]; then
    port=$REGISTRY_PORT
    if port_in_use "$port"; then
      log "REGISTRY_PORT=$port is already in use"
      return 1
    fi
  else
    port=$(cat "$PORT_FILE" 2>/dev/null || true)
    if ! [[ $port =~ ^[0-9]+$ ]] || port_in_use "$port"; then
      port=$(free_port 0)
    fi
  fi
  echo "$port" >"$PORT_FILE"

  log "starting $(basename "$jar" -runner.jar) on 127.0.0.1:$port ($STORAGE storage), state $STATE_DIR"
  # cd: Quarkus resolves relative paths against the working directory; keep them in the state dir.
  # setsid: the registry outlives this script's session (a terminal's Ctrl-C, pytest's process group).
  (
    cd "$STATE_DIR"
    exec setsid "$JAVA" "-Xmx$HEAP" -Xms64m -XX:+UseSerialGC -Djava.awt.headless=true "${local_opts[@]}" "$MARKER" \
      -Dquarkus.http.host=127.0.0.1 "-Dquarkus.http.port=$port" -Dquarkus.profile=prod \
      -Dquarkus.banner.enabled=false "${storage_opts[@]}" \
      -jar "$jar" </dev/null >>"$LOG_FILE" 2>&1
  ) &
  pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + START_TIMEOUT))
  until answers "http://127.0.0.1:$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "registry exited during start-up"
      rm -f "$PID_FILE"
      print_log_tail
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "registry not answering after ${START_TIMEOUT}s; stopping it"
      print_log_tail
      cmd_stop || true
      return 1
    fi
    sleep 0.5
  done
  log "registry ready (pid $pid)"
  print_urls
}

cmd_stop() {
  local pid
  if ! pid=$(running_pid); then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  log "stopping registry (pid $pid)"
  terminate_pid "$pid" registry
  rm -f "$PID_FILE"
}

cmd_status() {
  if running_pid >/dev/null && [[ -f $PORT_FILE ]]; then
    echo "running registry.url=$(base_url) pid=$(running_pid)"
    return 0
  fi
  echo "stopped"
  return 1
}

cmd_env() {
  if ! running_pid >/dev/null || [[ ! -f $PORT_FILE ]]; then
    log "not running"
    return 1
  fi
  print_urls
}

main() {
  case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *)
      echo "usage: $0 start|stop|status|env" >&2
      exit 2
      ;;
  esac
}

# One line, read whole before it runs: editing this file while a command runs cannot make bash read on.
main "$@"; exit
