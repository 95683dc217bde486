#!/usr/bin/env bash
# A Spark standalone cluster on this machine (one master, N workers), run from the pip pyspark install in
# .venv: its jars/ folder holds the whole of Spark, so the JVM classes are started with `java -cp`, no Docker.
#
#   spark-cluster.sh start    start (or reuse) the master and any worker that is not running, wait until
#                             all WORKERS are registered; prints exactly one stdout line:
#                               spark.master=spark://127.0.0.1:PORT
#   spark-cluster.sh stop     stop the workers and the master started from this state dir (pid files only;
#                             a worker's executors exit with it)
#   spark-cluster.sh status   "running spark.master=... workers=ALIVE/N" (exit 0) or "stopped" (exit 1)
#
# Environment: STATE_DIR (default <repo>/.state/spark-cluster), WORKERS (default 2), WORKER_CORES (default
# 1), WORKER_MEMORY (default 1g: room for one executor with Spark's default spark.executor.memory of 1g),
# SPARK_MASTER_PORT / SPARK_MASTER_WEBUI_PORT (default free ones), SPARK_DAEMON_HEAP (master and worker JVMs,
# default 256m), PYTHON (default <repo>/.venv/bin/python: its pyspark supplies the jars, and executors run it
# as PYSPARK_PYTHON), SPARK_CLUSTER_START_TIMEOUT (seconds, default 90), JAVA (default java), LOCAL_JAVA_OPTS
# (more options for the master and worker JVMs, none by default; see kafka.sh).
# Executors are children of their worker and inherit its environment (plus the application's
# spark.executorEnv.*): start the cluster with the landing zone's identity (AZURE_*) in the environment, or
# give it to the application as spark.executorEnv settings.
# Everything except the spark.master line goes to stderr; logs are under STATE_DIR.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=${STATE_DIR:-$REPO_ROOT/.state/spark-cluster}
WORKERS=${WORKERS:-2}
WORKER_CORES=${WORKER_CORES:-1}
WORKER_MEMORY=${WORKER_MEMORY:-1g}
DAEMON_HEAP=${SPARK_DAEMON_HEAP:-256m}
PYTHON=${PYTHON:-$REPO_ROOT/.venv/bin/python}
START_TIMEOUT=${SPARK_CLUSTER_START_TIMEOUT:-90}
JAVA=${JAVA:-java}

MASTER_PID_FILE=$STATE_DIR/master.pid
MASTER_LOG=$STATE_DIR/master.log
MASTER_URL_FILE=$STATE_DIR/master.url
MASTER_WEBUI_FILE=$STATE_DIR/master.webui

log() { echo "spark-cluster.sh: $*" >&2; }

# shellcheck source=deploy/local/ports.sh
source "$SCRIPT_DIR/ports.sh"

[[ $WORKERS =~ ^[1-9][0-9]*$ ]] || { log "WORKERS must be a positive number, got '$WORKERS'"; exit 2; }

# The pid from pid file $1 if that process is alive and runs class $2 with this state dir (guards against
# pid reuse: every daemon is started with -Dspark.cluster.state=$STATE_DIR).
running_pid() {
  local pid_file=$1 class=$2 pid cmdline
  [[ -f $pid_file ]] || return 1
  pid=$(<"$pid_file")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"-Dspark.cluster.state=$STATE_DIR "*"$class"* ]] || return 1
  echo "$pid"
}

master_pid() { running_pid "$MASTER_PID_FILE" org.apache.spark.deploy.master.Master; }
worker_pid() { running_pid "$STATE_DIR/worker-$1/worker.pid" org.apache.spark.deploy.worker.Worker; }

# A free port not in the list of ports given as arguments.
free_port_except() {
  local p i
  for ((i = 0; i < 50; i++)); do
    p=$(free_port)
    [[ " $* " == *" $p "* ]] || { echo "$p"; return 0; }
  done
  log "could not find a free port"
  return 1
}

# Spark's home is the pyspark package: jars/ is where a worker's executor command finds its classpath.
spark_home() {
  local home
  home=$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))') || {
    log "no pyspark in $PYTHON (run: bash deploy/local/setup-tests.sh, which installs requirements/test.txt in .venv)"
    return 1
  }
  [[ -d $home/jars ]] || { log "$home has no jars/ folder"; return 1; }
  echo "$home"
}

# The Scala version of those jars (spark-core_2.13-4.2.0.jar → 2.13): a worker builds its executors' classpath
# with Spark's launcher, which otherwise looks for a source tree's build directories.
scala_version() {
  local core
  core=$(compgen -G "$1/jars/spark-core_*.jar" | head -n 1) || { log "no spark-core jar in $1/jars"; return 1; }
  core=${core##*/spark-core_}
  echo "${core%%-*}"
}

# The number of workers the master's web UI lists as ALIVE (0 when it does not answer).
alive_workers() {
  local webui=$1
  "$PYTHON" - "$webui" <<'EOF' 2>/dev/null || echo 0
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=5) as response:
    print(json.load(response).get("aliveworkers", 0))
EOF
}

print_log_tail() {
  local file=$1
  if [[ -f $file ]]; then
    log "---- last 40 lines of $file ----"
    tail -n 40 "$file" >&2 || true
    log "------------------------------------"
  fi
}

# Start a daemon JVM ($1 = log file, $2 = pid file, the rest = class and arguments) in the background.
start_daemon() {
  local log_file=$1 pid_file=$2
  local -a local_opts
  read -r -a local_opts <<<"${LOCAL_JAVA_OPTS:-}"
  shift 2
  SPARK_HOME=$home SPARK_SCALA_VERSION=$scala PYSPARK_PYTHON=$PYTHON SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=127.0.0.1 \
    setsid "$JAVA" "-Xmx$DAEMON_HEAP" -Djava.awt.headless=true "${local_opts[@]}" "-Dspark.cluster.state=$STATE_DIR" \
    -cp "$home/jars/*" "$@" </dev/null >>"$log_file" 2>&1 &
  echo "$!" >"$pid_file"
}

start_master() {
  local port webui
  port=${SPARK_MASTER_PORT:-$(free_port_except)}
  webui=${SPARK_MASTER_WEBUI_PORT:-$(free_port_except "$port")}
  for p in "$port" "$webui"; do
    if port_in_use "$p"; then
      log "port $p is already in use"
      return 1
    fi
  done
  log "starting master on 127.0.0.1:$port (web UI $webui), state $STATE_DIR"
  start_daemon "$MASTER_LOG" "$MASTER_PID_FILE" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$port" --webui-port "$webui"
  echo "spark://127.0.0.1:$port" >"$MASTER_URL_FILE"
  echo "$webui" >"$MASTER_WEBUI_FILE"
  local deadline=$((SECONDS + START_TIMEOUT)) pid
  pid=$(<"$MASTER_PID_FILE")
  until can_connect "$port" && can_connect "$webui"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "master exited during startup"
      print_log_tail "$MASTER_LOG"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "master not listening after ${START_TIMEOUT}s"
      print_log_tail "$MASTER_LOG"
      return 1
    fi
    sleep 0.5
  done
}

can_connect() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_worker() {
  local n=$1 url=$2 dir=$STATE_DIR/worker-$1 port webui
  mkdir -p "$dir/work"
  port=$(free_port_except "$(master_port)" "$(<"$MASTER_WEBUI_FILE")")
  webui=$(free_port_except "$(master_port)" "$(<"$MASTER_WEBUI_FILE")" "$port")
  log "starting worker $n ($WORKER_CORES cores, $WORKER_MEMORY) on 127.0.0.1:$port (web UI $webui)"
  start_daemon "$dir/worker.log" "$dir/worker.pid" org.apache.spark.deploy.worker.Worker "$url" \
    --host 127.0.0.1 --port "$port" --webui-port "$webui" --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" \
    --work-dir "$dir/work"
}

master_port() { local url; url=$(<"$MASTER_URL_FILE"); echo "${url##*:}"; }

cmd_start() {
  command -v "$JAVA" >/dev/null 2>&1 || { log "java not found ($JAVA)"; return 1; }
  mkdir -p "$STATE_DIR"
  home=$(spark_home)
  scala=$(scala_version "$home")
  if master_pid >/dev/null && [[ -f $MASTER_URL_FILE && -f $MASTER_WEBUI_FILE ]]; then
    log "master already running (pid $(master_pid))"
  else
    start_master || { cmd_stop || true; return 1; }
  fi
  local url webui n
  url=$(<"$MASTER_URL_FILE")
  webui=$(<"$MASTER_WEBUI_FILE")
  for ((n = 1; n <= WORKERS; n++)); do
    worker_pid "$n" >/dev/null || start_worker "$n" "$url"
  done

  local deadline=$((SECONDS + START_TIMEOUT)) alive
  while :; do
    alive=$(alive_workers "$webui")
    ((alive >= WORKERS)) && break
    for ((n = 1; n <= WORKERS; n++)); do
      if ! worker_pid "$n" >/dev/null; then
        log "worker $n exited during startup"
        print_log_tail "$STATE_DIR/worker-$n/worker.log"
        cmd_stop || true
        return 1
      fi
    done
    if ((SECONDS >= deadline)); then
      log "$alive of $WORKERS workers registered after ${START_TIMEOUT}s; stopping the cluster"
      print_log_tail "$MASTER_LOG"
      cmd_stop || true
      return 1
    fi
    sleep 0.5
  done
  log "ready: $alive workers (master pid $(master_pid), web UI http://127.0.0.1:$webui)"
  echo "spark.master=$url"
}

cmd_stop() {
  local pid n dir
  for dir in "$STATE_DIR"/worker-*/; do
    [[ -d $dir ]] || continue
    n=${dir%/}
    n=${n##*/worker-}
    if pid=$(worker_pid "$n"); then
      log "stopping worker $n (pid $pid)"
      terminate_pid "$pid" "worker $n"
    fi
    rm -f "$dir/worker.pid"
  done
  if pid=$(master_pid); then
    log "stopping master (pid $pid)"
    terminate_pid "$pid" master
  else
    log "master not running"
  fi
  rm -f "$MASTER_PID_FILE"
  return 0
}

cmd_status() {
  if master_pid >/dev/null && [[ -f $MASTER_URL_FILE && -f $MASTER_WEBUI_FILE ]]; then
    echo "running spark.master=$(<"$MASTER_URL_FILE") workers=$(alive_workers "$(<"$MASTER_WEBUI_FILE")")/$WORKERS"
    return 0
  fi
  echo "stopped"
  return 1
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
