# shellcheck shell=bash
# What the local stacks share (sourced by stack.sh and stack-mariadb.sh, never run): logging, stack.env,
# process checks, the Kafka broker (kafka.sh), the Kafka Connect worker, connector registration and state,
# Debezium's signalling names, the converter choice (json | avro) and the schema registry the Avro converter
# needs (registry.sh).
#
# The sourcing script sets first: SCRIPT_DIR, REPO_ROOT, STATE_DIR, STACK_SCRIPT (its own path: usage prints
# its header), LOG_TAG, CONNECTOR_NAME, TOPIC_PREFIX, CONNECT_GROUP (the worker's group.id), CONNECT_TOPICS (its
# storage topics are _CONNECT_TOPICS-configs/-offsets/-status), CONNECT_DESC (appended to the worker's start-up
# log line). This file sets the common environment defaults and the paths under STATE_DIR below.
# And defines the hooks: connect_classpath (the worker's -cp), connect_fetch_jars (fetch what it lacks),
# stream_reader ARG (the id of the database connection Debezium streams through, empty when none; ARG from
# wait_streaming), stream_reader_desc ID ARG (that reader, for the log) and STREAM_WAITING (what
# wait_streaming waits for once the connector runs).
# For the commands both stacks share (up, down, status, restart-debezium, env): db_start, db_run_sql_file FILE,
# prepare_connector CONVERTER (see up_stack), DB_LABEL (the database's name in
# messages), DB_DATA (its data folder), db_pid, db_url, db_stop [KILL], READER_LABEL (the status line's name for
# stream_reader's answer) and print_env; a stack with more connectors than the main one also redefines
# extra_connectors and extra_reader_arg NAME (stream_reader's ARG for that connector).

JARS_DIR=${JARS_DIR:-$REPO_ROOT/.cache/jars}
export JARS_DIR
JAVA=${JAVA:-java}
PYTHON=${PYTHON:-python3}
TIMEOUT=${STACK_TIMEOUT:-300}
CONNECT_HEAP=${CONNECT_HEAP:-768m}
CONNECT_OFFSET_FLUSH_MS=${CONNECT_OFFSET_FLUSH_MS:-10000}
# KAFKA_CLIENT_PROPERTIES: a file of key=value lines every Kafka client of the stack needs to reach the broker's
# client listener when it is not PLAINTEXT (kafka.sh's KAFKA_CLIENT_PROTOCOL): security.protocol, sasl.mechanism,
# sasl.login.callback.handler.class, sasl.oauthbearer.* ... They go into the Connect worker's properties as they
# are (its own clients) and prefixed producer. / consumer. / admin. (the connectors' clients), and into every
# connector's config prefixed signal.consumer. (Debezium's Kafka signal channel) and, with a schema history
# topic (MariaDB), schema.history.internal.producer. / .consumer.. Unset: plain PLAINTEXT clients.
CLIENT_PROPERTIES=${KAFKA_CLIENT_PROPERTIES:-}

ENV_FILE=$STATE_DIR/stack.env
KAFKA_STATE=$STATE_DIR/kafka
CONNECT_DIR=$STATE_DIR/connect
CONNECT_CONFIG=$CONNECT_DIR/worker.properties
CONNECT_LOG4J=$CONNECT_DIR/log4j2.properties
CONNECT_PID=$CONNECT_DIR/connect.pid
CONNECT_OUT=$CONNECT_DIR/connect.out
CONNECTOR_JSON=$CONNECT_DIR/connector.json
REGISTERED=$CONNECT_DIR/registered
REGISTRY_STATE=$STATE_DIR/registry
AVRO_CONVERTER=io.apicurio.registry.utils.converter.AvroConverter
AVRO_JAR_SET=connect-avro

T0=$SECONDS
log() { printf '[%s %3ds] %s\n' "$LOG_TAG" "$((SECONDS - T0))" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$STACK_SCRIPT" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------- helpers
# shellcheck source=deploy/local/ports.sh
source "$SCRIPT_DIR/ports.sh"

# stack.env holds the values that must survive restarts (ports, password, options). KEY=VALUE lines.
env_get() {
  [[ -f $ENV_FILE ]] || return 0
  sed -n "s/^$1=//p" "$ENV_FILE" | tail -n 1
}

env_set() {
  mkdir -p "$STATE_DIR"
  local tmp
  tmp=$(mktemp "$STATE_DIR/.stack.env.XXXXXX")
  if [[ -f $ENV_FILE ]]; then
    grep -v "^$1=" "$ENV_FILE" >"$tmp" || true
  fi
  printf '%s=%s\n' "$1" "$2" >>"$tmp"
  chmod 600 "$tmp"
  mv "$tmp" "$ENV_FILE"
}

# A state dir holds one source's stack. `up` records its kind in stack.env (SOURCE=postgres | mariadb); a state
# dir from before that record is known by its database folder (postgres/ or mariadb/). Empty: no stack yet.
state_source() {
  local kind
  kind=$(env_get SOURCE)
  if [[ -z $kind ]]; then
    if [[ -d $STATE_DIR/mariadb ]]; then
      kind=mariadb
    elif [[ -d $STATE_DIR/postgres ]]; then
      kind=postgres
    fi
  fi
  echo "$kind"
}

# require_source KIND: refuse (exit 1, one message) a state dir that holds the other source's stack.
require_source() {
  local held suggest=$REPO_ROOT/.state
  held=$(state_source)
  [[ -z $held || $held == "$1" ]] && return 0
  [[ $1 != mariadb ]] || suggest=$REPO_ROOT/.state-mariadb
  [[ $suggest != "$STATE_DIR" ]] || suggest=$REPO_ROOT/.state-$1
  die "STATE_DIR $STATE_DIR holds the $held stack, and a state dir holds one source's stack: for $1 set another STATE_DIR (e.g. STATE_DIR=$suggest), or stop the $held stack (STATE_DIR=$STATE_DIR deploy/local/stack.sh down) and delete $STATE_DIR"
}

# Is $1 a live process whose command line contains $2 (guards against pid reuse)?
pid_matches() {
  local pid=$1 needle=$2 cmdline
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$needle"* ]]
}

# ---------------------------------------------------------------------------------------- kafka
kafka() { STATE_DIR=$KAFKA_STATE bash "$SCRIPT_DIR/kafka.sh" "$@"; }

kafka_start() {
  local line
  line=$(kafka start) || die "kafka.sh start failed"
  line=$(grep '^bootstrap.servers=' <<<"$line" | tail -n 1)
  [[ -n $line ]] || die "kafka.sh start printed no bootstrap.servers line"
  BOOTSTRAP=${line#bootstrap.servers=}
}

# ---------------------------------------------------------------------------------------- connect
connect_pid() {
  [[ -f $CONNECT_PID ]] || return 1
  local pid
  pid=$(<"$CONNECT_PID")
  pid_matches "$pid" "$CONNECT_CONFIG" || return 1
  echo "$pid"
}

connect_url() { echo "http://127.0.0.1:$(env_get CONNECT_PORT)"; }

write_connect_config() {
  local port=$1 by
  by="deploy/local/$(basename "$STACK_SCRIPT")"
  mkdir -p "$CONNECT_DIR"
  cat >"$CONNECT_CONFIG" <<EOF
# Generated by $by
bootstrap.servers=$BOOTSTRAP
group.id=$CONNECT_GROUP
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
config.storage.topic=_$CONNECT_TOPICS-configs
config.storage.replication.factor=1
offset.storage.topic=_$CONNECT_TOPICS-offsets
offset.storage.replication.factor=1
offset.storage.partitions=1
status.storage.topic=_$CONNECT_TOPICS-status
status.storage.replication.factor=1
status.storage.partitions=1
offset.flush.interval.ms=$CONNECT_OFFSET_FLUSH_MS
listeners=http://127.0.0.1:$port
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$port
topic.creation.enable=true
# Every plugin on the classpath (Kafka's, Debezium's, Apicurio's converter) ships ServiceLoader manifests: find
# them that way only. The default (hybrid_warn) also scans every class of every jar by reflection, 5-15 s of
# CPU at each worker start (the worker's own log says so and suggests this setting).
plugin.discovery=service_load
# A worker killed with -9 comes back as a new member: hand its connector over at once, not after 5 min.
scheduled.rebalance.max.delay.ms=0
session.timeout.ms=6000
heartbeat.interval.ms=2000
EOF
  if [[ -n $CLIENT_PROPERTIES ]]; then
    [[ -r $CLIENT_PROPERTIES ]] || die "KAFKA_CLIENT_PROPERTIES=$CLIENT_PROPERTIES: not readable"
    local prefix
    for prefix in "" producer. consumer. admin.; do
      echo "# KAFKA_CLIENT_PROPERTIES${prefix:+, prefixed $prefix}"
      client_properties | sed "s/^/$prefix/"
    done >>"$CONNECT_CONFIG"
    chmod 600 "$CONNECT_CONFIG"
  fi
  cat >"$CONNECT_LOG4J" <<EOF
# Generated by $by
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $CONNECT_DIR/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
EOF
}

# The key=value lines of KAFKA_CLIENT_PROPERTIES (comments and blank lines dropped).
client_properties() {
  [[ -n $CLIENT_PROPERTIES ]] || return 0
  grep -Ev '^[[:space:]]*([#!]|$)' "$CLIENT_PROPERTIES" | sed 's/^[[:space:]]*//'
}

# Start the worker unless it runs with this broker and classpath (then keep it); wait for its REST API.
connect_start() {
  local pid port cp
  local -a local_opts
  read -r -a local_opts <<<"${LOCAL_JAVA_OPTS:-}"
  cp=$(connect_classpath)
  if pid=$(connect_pid); then
    if ! grep -qx "bootstrap.servers=$BOOTSTRAP" "$CONNECT_CONFIG"; then
      log "kafka moved to $BOOTSTRAP: restarting connect"
      connect_stop
    elif [[ $(tr '\0' ' ' <"/proc/$pid/cmdline") != *" $cp "* ]]; then
      log "connect runs without the classpath $cp (e.g. the Avro converter jars): restarting it"
      connect_stop
    else
      log "connect already running (pid $pid, $(connect_url))"
      return 0
    fi
  fi
  connect_fetch_jars "$cp"
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found ($JAVA)"
  port=$(stable_port CONNECT_PORT CONNECT_PORT)
  write_connect_config "$port"
  log "starting kafka connect (REST $(connect_url), heap $CONNECT_HEAP$CONNECT_DESC)"
  # setsid: the worker outlives this script's session (a terminal's Ctrl-C, pytest's process group).
  setsid "$JAVA" "-Xmx$CONNECT_HEAP" -Xms128m -XX:+UseG1GC -Djava.awt.headless=true "${local_opts[@]}" \
    "-Dlog4j2.configurationFile=$CONNECT_LOG4J" -cp "$cp" \
    org.apache.kafka.connect.cli.ConnectDistributed "$CONNECT_CONFIG" \
    </dev/null >>"$CONNECT_OUT" 2>&1 &
  pid=$!
  echo "$pid" >"$CONNECT_PID"
  local deadline=$((SECONDS + TIMEOUT))
  until curl -sf -o /dev/null "$(connect_url)/connectors"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 40 "$CONNECT_OUT" "$CONNECT_DIR/connect.log" >&2 2>/dev/null || true
      rm -f "$CONNECT_PID"
      die "kafka connect exited during start-up"
    fi
    ((SECONDS < deadline)) || die "kafka connect REST not up after ${TIMEOUT}s (log: $CONNECT_DIR/connect.log)"
    sleep 0.5
  done
  log "kafka connect ready (pid $pid)"
}

connect_stop() { # connect_stop [KILL]
  local pid
  if ! pid=$(connect_pid); then
    rm -f "$CONNECT_PID"
    log "connect not running"
    return 0
  fi
  if [[ ${1:-} == KILL ]]; then
    log "killing kafka connect with SIGKILL (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
  else
    log "stopping kafka connect (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 600 || {
      log "connect did not stop in 60s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    }
  fi
  wait_gone "$pid" 100 || die "connect (pid $pid) did not exit"
  rm -f "$CONNECT_PID"
}

# ---------------------------------------------------------------------------------------- connectors
connector_status() { curl -sf "$(connect_url)/connectors/${1:-$CONNECTOR_NAME}/status" 2>/dev/null || true; }

# RUNNING when the connector ($1, default the main one) and all (>= 1) tasks run; "FAILED <trace>";
# "absent"; else the states seen.
connector_state() {
  connector_status "${1:-}" | "$PYTHON" -c '
import json, sys
text = sys.stdin.read()
if not text.strip():
    print("absent")
    raise SystemExit
d = json.loads(text)
states = [d["connector"]["state"]] + [t["state"] for t in d["tasks"]]
if "FAILED" in states:
    traces = [d["connector"].get("trace", "")] + [t.get("trace", "") for t in d["tasks"]]
    print("FAILED", "\n".join(x for x in traces if x))
elif d["tasks"] and set(states) == {"RUNNING"}:
    print("RUNNING")
else:
    print(d["connector"]["state"], "tasks=" + ",".join(t["state"] for t in d["tasks"]))
'
}

register_connector() { # register_connector [NAME FILE]
  local name=${1:-$CONNECTOR_NAME} file=${2:-$CONNECTOR_JSON} code
  code=$(curl -s -o "$CONNECT_DIR/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
    --data-binary "@$file" "$(connect_url)/connectors/$name/config") || true
  case $code in
    200 | 201) log "connector $name registered (HTTP $code)" ;;
    *)
      cat "$CONNECT_DIR/put.out" >&2 || true
      die "registering connector $name failed (HTTP $code)"
      ;;
  esac
  [[ $name != "$CONNECTOR_NAME" ]] || touch "$REGISTERED"
}

# Wait until the connector ($2, default the main one) and its task are RUNNING and Debezium streams from the
# database (stream_reader $3 answers, with an id other than $1 when given: the one a killed worker held).
wait_streaming() {
  local not_id=${1:-} name=${2:-$CONNECTOR_NAME} where=${3:-}
  local deadline=$((SECONDS + TIMEOUT)) state reader last=""
  while :; do
    state=$(connector_state "$name")
    case $state in
      RUNNING)
        reader=$(stream_reader "$where")
        if [[ -n $reader && $reader != "$not_id" ]]; then
          log "connector $name RUNNING, $(stream_reader_desc "$reader" "$where")"
          return 0
        fi
        state="RUNNING, waiting for the snapshot to finish / $STREAM_WAITING"
        ;;
      FAILED*)
        printf '%s\n' "$state" >&2
        die "connector $name failed (log: $CONNECT_DIR/connect.log)"
        ;;
    esac
    [[ $state == "$last" ]] || log "connector $name: $state"
    last=$state
    connect_pid >/dev/null || die "kafka connect process died (log: $CONNECT_DIR/connect.log)"
    ((SECONDS < deadline)) || die "connector not streaming after ${TIMEOUT}s (log: $CONNECT_DIR/connect.log)"
    sleep 1
  done
}

# ---------------------------------------------------------------------------------------- converter, registry
# The connector's converter: $1 (a flag), else the one kept in stack.env, else json; kept in stack.env.
choose_converter() {
  local converter=${1:-$(env_get CONVERTER)}
  converter=${converter:-json}
  [[ $converter == json || $converter == avro ]] || die "the converter is json or avro, got '$converter'"
  env_set CONVERTER "$converter"
  echo "$converter"
}

registry() { STATE_DIR=$REGISTRY_STATE bash "$SCRIPT_DIR/registry.sh" "$@"; }

registry_answers() { curl -sf -o /dev/null --max-time 5 "$1/apis/ccompat/v7/subjects"; }

# Make sure a registry serves the Avro connectors: $REGISTRY_URL when given (kept in stack.env), else the
# one this stack started before, else start one (registry.sh, state under $REGISTRY_STATE).
registry_ensure() {
  local url=${REGISTRY_URL:-} line
  if [[ -n $url ]]; then
    url=${url%%/apis/*}
    url=${url%/}
    env_set REGISTRY_URL "$url"
    env_set REGISTRY_OWNED 0
  elif [[ -n $(env_get REGISTRY_URL) && $(env_get REGISTRY_OWNED) == 0 ]]; then
    url=$(env_get REGISTRY_URL)
  else
    line=$(registry start) || die "registry.sh start failed (log: $REGISTRY_STATE/registry.log)"
    line=$(grep '^registry.url=' <<<"$line" | tail -n 1)
    [[ -n $line ]] || die "registry.sh start printed no registry.url line"
    url=${line#registry.url=}
    env_set REGISTRY_URL "$url"
    env_set REGISTRY_OWNED 1
  fi
  registry_answers "$url" || die "no schema registry answers at $url/apis/ccompat/v7"
  log "schema registry $url"
}

# Avro needs the converter jars on the worker (AVRO=1, kept) and a registry.
enable_avro() {
  env_set AVRO 1
  registry_ensure
}

# The worker's classpath: jar set $1, plus the Avro converter's once this stack uses Avro (AVRO=1).
classpath_with_avro() {
  local cp="$JARS_DIR/$1/*"
  [[ $(env_get AVRO) == 1 ]] && cp+=":$JARS_DIR/$AVRO_JAR_SET/*"
  echo "$cp"
}

# Fetch jar set $1 and, when classpath $2 names it, the Avro converter's, unless they are there.
fetch_jars_with_avro() {
  [[ -f $JARS_DIR/$1/.complete ]] || bash "$SCRIPT_DIR/fetch-jars.sh" "$1" >&2
  if [[ $2 == *$AVRO_JAR_SET* && ! -f $JARS_DIR/$AVRO_JAR_SET/.complete ]]; then
    bash "$SCRIPT_DIR/fetch-jars.sh" "$AVRO_JAR_SET" >&2
  fi
}

# The connector settings of converter $1 as a JSON object (none for json: the worker's JsonConverter).
converter_settings_json() {
  "$PYTHON" - "$1" "$(env_get REGISTRY_URL)" "$AVRO_CONVERTER" <<'EOF'
import json, sys
converter, registry, avro_class = sys.argv[1:4]
config = {}
if converter == "avro":
    # Avro type names allow [A-Za-z0-9_] only: Debezium rewrites other characters in schema/field names.
    config["schema.name.adjustment.mode"] = "avro"
    config["field.name.adjustment.mode"] = "avro"
    for side in ("key", "value"):
        # Apicurio's converter, Confluent-compatible: the 4-byte content id in the payload, no headers.
        c = f"{side}.converter"
        config[c] = avro_class
        config[f"{c}.apicurio.registry.url"] = registry + "/apis/registry/v2"
        config[f"{c}.apicurio.registry.auto-register"] = "true"
        config[f"{c}.apicurio.registry.find-latest"] = "true"
        config[f"{c}.apicurio.registry.as-confluent"] = "true"
        config[f"{c}.apicurio.registry.use-id"] = "contentId"
        config[f"{c}.apicurio.registry.headers.enabled"] = "false"
print(json.dumps(config))
EOF
}

# The registry lines of `up` and `env` (registry.url, schema.registry.url) when converter $1 is avro.
registry_lines() { # registry_lines CONVERTER
  [[ $1 == avro ]] || return 0
  local url
  url=$(env_get REGISTRY_URL)
  [[ -n $url ]] || return 0
  echo "registry.url=$url"
  echo "schema.registry.url=$url/apis/ccompat/v7"
}

# The last lines of `up` and `env`: connect=, connector=, converter=, the signal lines, the registry lines.
connector_lines() {
  echo "connect=$(connect_url)"
  echo "connector=$CONNECTOR_NAME"
  local converter
  converter=$(env_get CONVERTER)
  echo "converter=${converter:-json}"
  signal_lines
  registry_lines "$converter"
}

# status: the registry's line when this stack uses one; fails when it does not answer.
registry_status() {
  local url
  url=$(env_get REGISTRY_URL)
  [[ -n $url ]] || return 0
  if registry_answers "$url"; then
    echo "registry: running registry.url=$url"
  else
    echo "registry: not answering registry.url=$url"
    return 1
  fi
}

# down: stop the registry this stack started (none when REGISTRY_URL was given).
registry_stop_owned() {
  [[ -f $REGISTRY_STATE/registry.pid ]] || return 0
  registry stop || log "registry.sh stop failed"
}

# ---------------------------------------------------------------------------------------- signals
# The Kafka signal channel's topic and the sink notification channel's topic of topic prefix $1.
signal_topic() { echo "${1:-$TOPIC_PREFIX}-signal"; }
notification_topic() { echo "${1:-$TOPIC_PREFIX}-notifications"; }

signal_lines() { # signal_lines [PREFIX]
  local prefix=${1:-$TOPIC_PREFIX}
  echo "topic_prefix=$prefix"
  echo "signal_topic=$(signal_topic "$prefix")"
  echo "notification_topic=$(notification_topic "$prefix")"
}

# incremental.snapshot.chunk.size: INCREMENTAL_SNAPSHOT_CHUNK_SIZE, else the one kept in stack.env, else 100.
chunk_size() {
  local size=${INCREMENTAL_SNAPSHOT_CHUNK_SIZE:-$(env_get CHUNK_SIZE)}
  size=${size:-100}
  [[ $size =~ ^[1-9][0-9]*$ ]] || die "INCREMENTAL_SNAPSHOT_CHUNK_SIZE is a positive integer, got '$size'"
  env_set CHUNK_SIZE "$size"
  echo "$size"
}

# write_connector_file FILE CONVERTER PREFIX SIGNAL_TABLE ENTRIES: a connector's config (mode 600), the stack's
# own ENTRIES (Python dict entries: class, database, topics) plus what both stacks' connectors share (snapshot,
# deletes and TRUNCATE, types, heartbeats, topic creation, signals, notifications) and the converter's settings.
write_connector_file() {
  local file=$1 converter=$2 prefix=$3 signal_table=$4 entries=$5 chunk
  chunk=$(chunk_size)
  # The client settings (a secret among them, perhaps) travel in the environment, not on a command line.
  STACK_CLIENT_PROPERTIES=$(client_properties) "$PYTHON" - "$file" "$(converter_settings_json "$converter")" <<EOF
import json, os, sys
config = {
$entries
    "snapshot.mode": "initial",
    "tombstones.on.delete": "true",
    # Debezium's default \`t\` drops TRUNCATE, leaving the truncated rows in the mirror.
    "skipped.operations": "none",
    "decimal.handling.mode": "precise",
    "time.precision.mode": "adaptive_time_microseconds",
    "heartbeat.interval.ms": "10000",
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "1",
    # Signals (ad hoc incremental snapshots): the Kafka channel takes them, the source channel's table
    # holds the snapshot windows' watermarks (required for incremental snapshots). A 1 s poll (not 100 ms
    # every 5 s) lets the signal consumer join its group within seconds of the connector's start.
    "signal.enabled.channels": "source,kafka",
    "signal.data.collection": "$signal_table",
    "signal.kafka.topic": "$(signal_topic "$prefix")",
    "signal.kafka.bootstrap.servers": "$BOOTSTRAP",
    "signal.kafka.groupId": "$(signal_topic "$prefix")",
    "signal.kafka.poll.timeout.ms": "1000",
    "incremental.snapshot.chunk.size": "$chunk",
    "notification.enabled.channels": "sink",
    "notification.sink.topic.name": "$(notification_topic "$prefix")",
}
config.update(json.loads(sys.argv[2]))
# KAFKA_CLIENT_PROPERTIES: the clients Debezium makes itself reach the broker as the worker's do.
client = dict(line.split("=", 1) for line in os.environ["STACK_CLIENT_PROPERTIES"].splitlines() if "=" in line)
prefixes = ["signal.consumer."]
if "schema.history.internal.kafka.bootstrap.servers" in config:
    prefixes += ["schema.history.internal.producer.", "schema.history.internal.consumer."]
config.update({prefix + key.strip(): value.strip() for prefix in prefixes for key, value in client.items()})
with open(sys.argv[1], "w") as fh:
    json.dump(config, fh, indent=2)
EOF
  chmod 600 "$file"
}

# stable_port VAR KEY: a server's port, kept in stack.env under KEY across restarts: $VAR when set (refused when
# in use), else the kept one while it is free, else a free one.
stable_port() {
  local override=${!1:-} port
  port=${override:-$(env_get "$2")}
  if [[ -z $port ]] || port_in_use "$port"; then
    [[ -z $override ]] || die "$1=$override is in use"
    port=$(free_port 0)
  fi
  env_set "$2" "$port"
  echo "$port"
}

# ---------------------------------------------------------------------------------------- shared commands
# The connectors beyond the main one (none unless the stack redefines it), and stream_reader's ARG for one.
extra_connectors() { :; }
extra_reader_arg() { :; }

# `up` after its flags: up_stack CONVERTER INIT_SQL SOURCE [KEY=VALUE...] checks the --init-sql file, records
# the source (and the KEY=VALUEs) in stack.env, starts the database (db_start), runs the file once (db_run_sql_file
# FILE; not again once the connector is registered), starts Kafka, the registry for Avro and Kafka Connect,
# writes the connector's config (prepare_connector CONVERTER), registers it and waits until it streams.
up_stack() {
  local converter=$1 init_sql=$2 source=$3 setting
  shift 3
  if [[ -n $init_sql ]]; then
    [[ -r $init_sql ]] || die "--init-sql $init_sql: not readable"
    init_sql=$(cd "$(dirname "$init_sql")" && pwd)/$(basename "$init_sql")
  fi
  command -v curl >/dev/null || die "curl is required"
  command -v "$PYTHON" >/dev/null || die "$PYTHON is required"
  mkdir -p "$STATE_DIR"
  env_set SOURCE "$source"
  for setting in "$@"; do
    env_set "${setting%%=*}" "${setting#*=}"
  done

  db_start
  if [[ -n $init_sql ]]; then
    if [[ -f $REGISTERED ]]; then
      log "connector already registered: not running --init-sql $init_sql again"
    else
      log "running $init_sql"
      db_run_sql_file "$init_sql" >&2 || die "--init-sql $init_sql failed"
    fi
  fi
  kafka_start
  [[ $converter != avro ]] || enable_avro
  connect_start
  prepare_connector "$converter"
  register_connector
  wait_streaming
  log "up in $((SECONDS - T0))s"
  print_env
}

# Both the database and the Kafka Connect worker run, else exit 1 ($1: how to start them, for the message).
require_running() {
  db_pid >/dev/null || die "$DB_LABEL is not running${1:+ ($1)}"
  connect_pid >/dev/null || die "kafka connect is not running${1:+ ($1)}"
}

cmd_down() { # cmd_down [--kill]
  local kill=
  case ${1:-} in
    "") ;;
    --kill) kill=KILL ;;
    *) die "down takes only --kill, got '$1'" ;;
  esac
  connect_stop $kill
  if [[ -f $KAFKA_STATE/kafka.pid ]]; then
    if [[ -n $kill ]]; then kafka kill; else kafka stop; fi || log "kafka.sh failed to stop the broker"
  else
    log "kafka not running"
  fi
  if [[ -d $DB_DATA ]]; then
    db_stop $kill
  else
    log "$DB_LABEL not initialised"
  fi
  registry_stop_owned
  log "down"
}

cmd_status() {
  local ok=0 pid line name
  if pid=$(db_pid); then
    echo "$DB_LABEL: running pid=$pid $(db_url | sed 's#://\([^:]*\):[^@]*@#://\1:***@#')"
  else
    echo "$DB_LABEL: stopped"
    ok=1
  fi
  if line=$(kafka status 2>/dev/null); then
    echo "kafka: $line"
  else
    echo "kafka: stopped"
    ok=1
  fi
  registry_status || ok=1
  if pid=$(connect_pid); then
    echo "connect: running pid=$pid $(connect_url)"
    echo "connector: $CONNECTOR_NAME $(connector_state | head -n 1) $READER_LABEL=$(stream_reader "")"
    for name in $(extra_connectors); do
      echo "connector: $name $(connector_state "$name" | head -n 1) $READER_LABEL=$(stream_reader "$(extra_reader_arg "$name")")"
    done
  else
    echo "connect: stopped"
    echo "connector: $CONNECTOR_NAME unknown (connect not running)"
    ok=1
  fi
  return $ok
}

# Kill the Kafka Connect worker, start it again, and wait until every connector streams through a new reader.
cmd_restart_debezium() {
  require_running "$(basename "$STACK_SCRIPT") up first"
  BOOTSTRAP=$(<"$KAFKA_STATE/bootstrap")
  local old name
  local -A old_extra=()
  old=$(stream_reader "")
  for name in $(extra_connectors); do
    old_extra[$name]=$(stream_reader "$(extra_reader_arg "$name")")
  done
  connect_stop KILL
  connect_start
  wait_streaming "$old"
  for name in $(extra_connectors); do
    wait_streaming "${old_extra[$name]}" "$name" "$(extra_reader_arg "$name")"
  done
  print_env
}

cmd_env() {
  require_running
  print_env
}
