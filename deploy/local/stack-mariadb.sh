#!/usr/bin/env bash
# Local end-to-end stack for the second source, no Docker: MariaDB (Debian's mariadb-server) -> Debezium
# MariaDB connector in its own Kafka Connect distributed worker -> single-node KRaft Kafka (kafka.sh).
# The Postgres stack (stack.sh) is the sibling; `stack.sh up --source mariadb` runs this script.
#
#   stack-mariadb.sh up [--init-sql FILE]
#       start (or reuse) everything, run FILE against the database before the connector is registered
#       (only the first time), register the connector, wait until the connector and its task are
#       RUNNING and Debezium reads the binlog, then print exactly (stdout):
#         mariadb=mysql://USER:PASSWORD@127.0.0.1:PORT/DB
#         bootstrap.servers=127.0.0.1:PORT
#         topics=REGEX                      (matches the captured tables' topics, Java and Python)
#         connect=http://127.0.0.1:PORT
#         connector=NAME
#         converter=json                    (Kafka's JsonConverter with schemas.enable=true, on the worker)
#         topic_prefix=PREFIX               (Debezium's topic.prefix: the key of every signal message)
#         signal_topic=PREFIX-signal        (Kafka signal channel: produce key PREFIX, value e.g.
#                                            {"type":"execute-snapshot","data":{"data-collections":
#                                            ["mirror.t"],"type":"incremental"}} for an incremental snapshot)
#         notification_topic=PREFIX-notifications  (Debezium's sink notifications: incremental snapshot
#                                            STARTED / IN_PROGRESS / TABLE_SCAN_COMPLETED / COMPLETED)
#   stack-mariadb.sh down               stop what this state dir started (Connect, Kafka, MariaDB), by pid
#   stack-mariadb.sh status             one line per component; exit 0 when all run, 1 otherwise
#   stack-mariadb.sh restart-debezium   kill -9 the Connect worker and start it again with the same config
#                                       and offsets: Debezium re-reads the binlog from its last committed offset
#   stack-mariadb.sh env                print the `up` lines of a running stack again
#   stack-mariadb.sh sql [ARGS...]      the mariadb client as the superuser on this stack's server (stdin SQL)
#
# The connector is registered with the settings the mirror needs (README, "Recommended Debezium
# configuration"): bigint.unsigned.handling.mode=precise (BIGINT UNSIGNED above 2^63 would wrap to negative
# as `long`), decimal.handling.mode=precise, time.precision.mode=adaptive_time_microseconds (TIME as
# microseconds, so '838:59:59' and negative times survive; DATETIME as local microseconds, TIMESTAMP as a
# UTC ISO string), skipped.operations=none (Debezium's default `t` drops TRUNCATE, leaving stale rows in the
# mirror), tombstones.on.delete=true, the schema history topic on the stack's broker.
#
# Signals: the source and kafka signal channels. Incremental snapshots write their watermarks to the
# signalling table debezium.debezium_signal (database debezium, outside database.include.list, so no mirrored
# table; Debezium captures it anyway and publishes the watermark rows to PREFIX.debezium.debezium_signal,
# which the topics regex does not match). incremental.snapshot.chunk.size is INCREMENTAL_SNAPSHOT_CHUNK_SIZE
# (default 100, kept in stack.env) so tests can interleave writes with a multi-chunk snapshot.
#
# Everything except the `up` lines goes to stderr. State (data, configs, logs, pid files) lives under
# $STATE_DIR (default <repo>/.state-mariadb): mariadb/, kafka/, connect/, stack.env.
#
# Environment (defaults): STATE_DIR (<repo>/.state-mariadb), JARS_DIR (<repo>/.cache/jars), MARIADB_USER
# (mirror), MARIADB_DB (mirror), MARIADB_PORT / CONNECT_PORT (free ones, kept across restarts),
# MARIADB_OS_USER (mysql; the account MariaDB runs as when this script runs as root), TOPIC_PREFIX
# (mariadb1), CONNECTOR_NAME (mirror-source-mariadb), INCREMENTAL_SNAPSHOT_CHUNK_SIZE (100), CONNECT_HEAP (768m), CONNECT_OFFSET_FLUSH_MS (10000),
# STACK_TIMEOUT (300 seconds per wait), JAVA (java), PYTHON (python3).
#
# Pinned versions: Kafka 4.3.1 + Debezium MariaDB connector 3.5.0.Final (the newest Maven Central serves;
# deploy/local/maven/connect-debezium-mariadb/pom.xml, a worker classpath of its own because the Postgres
# set's Debezium 3.7.0 core cannot share it), MariaDB = the Debian release's `mariadb-server` (10.11 on bookworm).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=$(realpath -m "${STATE_DIR:-$REPO_ROOT/.state-mariadb}")
JARS_DIR=${JARS_DIR:-$REPO_ROOT/.cache/jars}
export JARS_DIR
JAVA=${JAVA:-java}
PYTHON=${PYTHON:-python3}
TIMEOUT=${STACK_TIMEOUT:-300}

DB_USER=${MARIADB_USER:-mirror}
DB_NAME=${MARIADB_DB:-mirror}
DB_OS_USER=${MARIADB_OS_USER:-mysql}
TOPIC_PREFIX=${TOPIC_PREFIX:-mariadb1}
CONNECTOR_NAME=${CONNECTOR_NAME:-mirror-source-mariadb}
CONNECT_HEAP=${CONNECT_HEAP:-768m}
CONNECT_OFFSET_FLUSH_MS=${CONNECT_OFFSET_FLUSH_MS:-10000}
JAR_SET=connect-debezium-mariadb
# Debezium joins the binlog as a replica: its server id must differ from the server's (1).
DEBEZIUM_SERVER_ID=5401
# The signalling table, in a database of its own (not in database.include.list).
SIGNAL_DB=debezium
SIGNAL_TABLE=$SIGNAL_DB.debezium_signal

ENV_FILE=$STATE_DIR/stack.env
DB_DIR=$STATE_DIR/mariadb
DB_DATA=$DB_DIR/data
DB_CNF=$DB_DIR/my.cnf
DB_SOCK=$DB_DIR/mariadb.sock
DB_PIDFILE=$DB_DIR/mariadb.pid
DB_LOG=$DB_DIR/mariadb.err
KAFKA_STATE=$STATE_DIR/kafka
CONNECT_DIR=$STATE_DIR/connect
CONNECT_CONFIG=$CONNECT_DIR/worker.properties
CONNECT_LOG4J=$CONNECT_DIR/log4j2.properties
CONNECT_PID=$CONNECT_DIR/connect.pid
CONNECT_OUT=$CONNECT_DIR/connect.out
CONNECTOR_JSON=$CONNECT_DIR/connector.json
REGISTERED=$CONNECT_DIR/registered

T0=$SECONDS
log() { printf '[stack-mariadb %3ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---------------------------------------------------------------------------------------- helpers
# shellcheck source=deploy/local/ports.sh
source "$SCRIPT_DIR/ports.sh"

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

# Is $1 a live process whose command line contains $2 (guards against pid reuse)?
pid_matches() {
  local pid=$1 needle=$2 cmdline
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$needle"* ]]
}

wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$1" 2>/dev/null
}

# ---------------------------------------------------------------------------------------- mariadb
ensure_mariadb_installed() {
  [[ -x $(mariadbd_bin) ]] && command -v mariadb-install-db >/dev/null 2>&1 && return 0
  [[ $(id -u) == 0 ]] || die "MariaDB is not installed (no mariadbd); as root this script runs: apt-get install mariadb-server mariadb-client"
  log "installing MariaDB from Debian packages (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 update >&2
  apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends install mariadb-server mariadb-client >&2
  # This script runs its own server: the package's service (port 3306, /var/lib/mysql) is not wanted.
  stop_packaged_service
  [[ -x $(mariadbd_bin) ]] || die "apt-get install mariadb-server did not provide mariadbd"
}

# The Debian package starts and enables a system service unless policy-rc.d forbids it: stop and disable it.
stop_packaged_service() {
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    systemctl disable --now mariadb.service >&2 2>/dev/null || true
  elif [[ -x /etc/init.d/mariadb ]]; then
    /etc/init.d/mariadb stop >&2 2>/dev/null || true
    update-rc.d mariadb disable >&2 2>/dev/null || true
  fi
}

mariadbd_bin() { command -v mariadbd 2>/dev/null || echo /usr/sbin/mariadbd; }

as_db() {
  if [[ $(id -u) == 0 ]]; then
    (cd / && runuser -u "$DB_OS_USER" -- "$@")
  else
    "$@"
  fi
}

db_pid() {
  [[ -f $DB_PIDFILE ]] || return 1
  local pid
  pid=$(<"$DB_PIDFILE")
  pid_matches "$pid" "$DB_CNF" || return 1
  echo "$pid"
}

# The mariadb client as the superuser over this stack's socket (password from stack.env, never on argv).
db_sql() {
  MYSQL_PWD=$(env_get DB_ROOT_PASSWORD) mariadb --no-defaults --protocol=socket -S "$DB_SOCK" -u root \
    --default-character-set=utf8mb4 --batch --skip-column-names "$@"
}

write_db_config() {
  local port=$1 os_user
  os_user=$(if [[ $(id -u) == 0 ]]; then echo "$DB_OS_USER"; else id -un; fi)
  cat >"$DB_CNF" <<EOF
# Generated by deploy/local/stack-mariadb.sh (the server reads only this file: --defaults-file)
[mariadbd]
user = $os_user
datadir = $DB_DATA
socket = $DB_SOCK
pid-file = $DB_PIDFILE
log-error = $DB_LOG
port = $port
bind-address = 127.0.0.1
skip-name-resolve
# What Debezium's binlog reader needs: row events carrying every column, a server id.
server_id = 1
log_bin = $DB_DIR/binlog/mariadb-bin
binlog_format = ROW
binlog_row_image = FULL
expire_logs_days = 1
default_time_zone = '+00:00'
character_set_server = utf8mb4
collation_server = utf8mb4_unicode_ci
innodb_buffer_pool_size = 64M
max_connections = 50
# Whole 100 KB+ values and 1000-row transactions in one packet/event.
max_allowed_packet = 64M
EOF
  [[ $(id -u) != 0 ]] || chown "$DB_OS_USER:" "$DB_CNF"
}

db_init() {
  mkdir -p "$DB_DIR/binlog"
  chmod 755 "$DB_DIR"
  [[ $(id -u) != 0 ]] || chown -R "$DB_OS_USER:" "$DB_DIR"
  as_db test -w "$DB_DIR" ||
    die "$DB_OS_USER cannot write $DB_DIR: every parent directory of STATE_DIR must be searchable (o+x) by $DB_OS_USER"
  local pw
  pw=$(env_get DB_ROOT_PASSWORD)
  [[ -n $pw ]] || env_set DB_ROOT_PASSWORD "$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
  pw=$(env_get DB_PASSWORD)
  [[ -n $pw ]] || env_set DB_PASSWORD "$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
  write_db_config 0
  log "mariadb-install-db $DB_DATA"
  # normal: root gets a password (set below), not unix_socket auth tied to the OS account running us.
  as_db mariadb-install-db --defaults-file="$DB_CNF" --auth-root-authentication-method=normal \
    --skip-test-db >>"$DB_DIR/install-db.log" 2>&1 || {
    tail -n 30 "$DB_DIR/install-db.log" >&2
    die "mariadb-install-db failed"
  }
}

# Users and the database, once: the superuser gets its password, Debezium's user every privilege it needs
# (RELOAD/LOCK for the snapshot, REPLICATION SLAVE/CLIENT and BINLOG MONITOR for the binlog).
db_bootstrap() {
  [[ $(env_get DB_BOOTSTRAPPED) == 1 ]] && return 0
  local root_pw user_pw
  root_pw=$(env_get DB_ROOT_PASSWORD)
  user_pw=$(env_get DB_PASSWORD)
  log "creating database $DB_NAME and user $DB_USER"
  mariadb --no-defaults --protocol=socket -S "$DB_SOCK" -u root --batch <<EOF || die "bootstrapping MariaDB users failed"
ALTER USER 'root'@'localhost' IDENTIFIED BY '$root_pw';
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$user_pw';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'%';
FLUSH PRIVILEGES;
EOF
  env_set DB_BOOTSTRAPPED 1
}

db_start() {
  ensure_mariadb_installed
  if [[ $(id -u) == 0 ]] && ! id "$DB_OS_USER" >/dev/null 2>&1; then
    log "creating system user $DB_OS_USER to run MariaDB"
    useradd --system --no-create-home --shell /usr/sbin/nologin "$DB_OS_USER"
  fi
  [[ -d $DB_DATA/mysql ]] || db_init
  local pid port
  if pid=$(db_pid); then
    log "mariadb already running (pid $pid, port $(env_get DB_PORT))"
  else
    port=${MARIADB_PORT:-$(env_get DB_PORT)}
    if [[ -z $port ]] || port_in_use "$port"; then
      [[ -z ${MARIADB_PORT:-} ]] || die "MARIADB_PORT=$MARIADB_PORT is in use"
      port=$(free_port 0)
    fi
    env_set DB_PORT "$port"
    write_db_config "$port"
    rm -f "$DB_PIDFILE"
    log "starting mariadb $("$(mariadbd_bin)" --version | awk '{print $3}') on 127.0.0.1:$port"
    # setsid: the server outlives this script's session (pytest's process group, a terminal's Ctrl-C).
    setsid "$(mariadbd_bin)" --defaults-file="$DB_CNF" </dev/null >>"$DB_DIR/mariadbd.out" 2>&1 &
    local deadline=$((SECONDS + TIMEOUT)) launched=$!
    # ping exits 0 once the server answers, whatever the credentials.
    until [[ -S $DB_SOCK ]] && db_pid >/dev/null &&
      mariadb-admin --no-defaults --protocol=socket -S "$DB_SOCK" -u root ping >/dev/null 2>&1; do
      if ! kill -0 "$launched" 2>/dev/null; then
        tail -n 30 "$DB_LOG" >&2 2>/dev/null || true
        die "mariadb exited during start-up (log: $DB_LOG)"
      fi
      ((SECONDS < deadline)) || die "mariadb not up after ${TIMEOUT}s (log: $DB_LOG)"
      sleep 0.3
    done
    log "mariadb ready (pid $(db_pid))"
  fi
  db_bootstrap
}

db_stop() {
  local pid
  if pid=$(db_pid); then
    log "stopping mariadb (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 600 || {
      log "mariadb did not stop in 60s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 100 || true
    }
  else
    log "mariadb not running"
  fi
}

db_url() {
  echo "mysql://$DB_USER:$(env_get DB_PASSWORD)@127.0.0.1:$(env_get DB_PORT)/$DB_NAME"
}

# The connection id of Debezium's binlog dump (a replica reading the binlog), empty when nobody reads it.
binlog_reader_id() {
  db_sql -e "SELECT id FROM information_schema.PROCESSLIST WHERE command LIKE 'Binlog Dump%' AND user = '$DB_USER' ORDER BY id DESC LIMIT 1" 2>/dev/null || true
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
  local port=$1
  mkdir -p "$CONNECT_DIR"
  cat >"$CONNECT_CONFIG" <<EOF
# Generated by deploy/local/stack-mariadb.sh
bootstrap.servers=$BOOTSTRAP
group.id=stack-connect-mariadb
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
config.storage.topic=_connect-mariadb-configs
config.storage.replication.factor=1
offset.storage.topic=_connect-mariadb-offsets
offset.storage.replication.factor=1
offset.storage.partitions=1
status.storage.topic=_connect-mariadb-status
status.storage.replication.factor=1
status.storage.partitions=1
offset.flush.interval.ms=$CONNECT_OFFSET_FLUSH_MS
listeners=http://127.0.0.1:$port
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$port
topic.creation.enable=true
# A worker killed with -9 comes back as a new member: hand its connector over at once, not after 5 min.
scheduled.rebalance.max.delay.ms=0
session.timeout.ms=6000
heartbeat.interval.ms=2000
EOF
  cat >"$CONNECT_LOG4J" <<EOF
# Generated by deploy/local/stack-mariadb.sh
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

connect_start() {
  local pid port
  if pid=$(connect_pid); then
    if grep -qx "bootstrap.servers=$BOOTSTRAP" "$CONNECT_CONFIG"; then
      log "connect already running (pid $pid, $(connect_url))"
      return 0
    fi
    log "kafka moved to $BOOTSTRAP: restarting connect"
    connect_stop
  fi
  [[ -f $JARS_DIR/$JAR_SET/.complete ]] || bash "$SCRIPT_DIR/fetch-jars.sh" "$JAR_SET" >&2
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found ($JAVA)"
  port=${CONNECT_PORT:-$(env_get CONNECT_PORT)}
  if [[ -z $port ]] || port_in_use "$port"; then
    [[ -z ${CONNECT_PORT:-} ]] || die "CONNECT_PORT=$CONNECT_PORT is in use"
    port=$(free_port 0)
  fi
  env_set CONNECT_PORT "$port"
  write_connect_config "$port"
  log "starting kafka connect (REST $(connect_url), heap $CONNECT_HEAP, jar set $JAR_SET)"
  setsid "$JAVA" "-Xmx$CONNECT_HEAP" -Xms128m -XX:+UseG1GC -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$CONNECT_LOG4J" -cp "$JARS_DIR/$JAR_SET/*" \
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

topics_regex() {
  local prefix=${TOPIC_PREFIX//./\\.}
  echo "${prefix}\\.${DB_NAME}\\..*"
}

signal_topic() { echo "$TOPIC_PREFIX-signal"; }
notification_topic() { echo "$TOPIC_PREFIX-notifications"; }

# Create the signalling table (Debezium's layout: id, type, data) unless it exists.
ensure_signal_table() {
  db_sql <<EOF || die "creating the signalling table $SIGNAL_TABLE failed"
CREATE DATABASE IF NOT EXISTS \`$SIGNAL_DB\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE TABLE IF NOT EXISTS $SIGNAL_TABLE (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL);
EOF
}

# incremental.snapshot.chunk.size: INCREMENTAL_SNAPSHOT_CHUNK_SIZE, else the one kept in stack.env, else 100.
chunk_size() {
  local size=${INCREMENTAL_SNAPSHOT_CHUNK_SIZE:-$(env_get CHUNK_SIZE)}
  size=${size:-100}
  [[ $size =~ ^[1-9][0-9]*$ ]] || die "INCREMENTAL_SNAPSHOT_CHUNK_SIZE is a positive integer, got '$size'"
  env_set CHUNK_SIZE "$size"
  echo "$size"
}

write_connector_json() {
  local chunk
  chunk=$(chunk_size)
  "$PYTHON" - "$CONNECTOR_JSON" <<EOF
import json, sys
config = {
    "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
    "tasks.max": "1",
    "database.hostname": "127.0.0.1",
    "database.port": "$(env_get DB_PORT)",
    "database.user": "$DB_USER",
    "database.password": "$(env_get DB_PASSWORD)",
    "database.server.id": "$DEBEZIUM_SERVER_ID",
    "database.ssl.mode": "disable",
    "database.include.list": "$DB_NAME",
    "topic.prefix": "$TOPIC_PREFIX",
    "schema.history.internal.kafka.bootstrap.servers": "$BOOTSTRAP",
    "schema.history.internal.kafka.topic": "_schema-history.$TOPIC_PREFIX",
    "include.schema.changes": "false",
    "snapshot.mode": "initial",
    "tombstones.on.delete": "true",
    "skipped.operations": "none",
    "bigint.unsigned.handling.mode": "precise",
    "decimal.handling.mode": "precise",
    "time.precision.mode": "adaptive_time_microseconds",
    "heartbeat.interval.ms": "10000",
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "1",
    # Signals (ad hoc incremental snapshots): the Kafka channel takes them, the source channel's table
    # holds the snapshot windows' watermarks. A 1 s poll (not 100 ms every 5 s) lets the signal consumer
    # join its group within seconds of the connector's start.
    "signal.enabled.channels": "source,kafka",
    "signal.data.collection": "$SIGNAL_TABLE",
    "signal.kafka.topic": "$(signal_topic)",
    "signal.kafka.bootstrap.servers": "$BOOTSTRAP",
    "signal.kafka.groupId": "$(signal_topic)",
    "signal.kafka.poll.timeout.ms": "1000",
    "incremental.snapshot.chunk.size": "$chunk",
    "notification.enabled.channels": "sink",
    "notification.sink.topic.name": "$(notification_topic)",
}
with open(sys.argv[1], "w") as fh:
    json.dump(config, fh, indent=2)
EOF
  chmod 600 "$CONNECTOR_JSON"
}

connector_status() { curl -sf "$(connect_url)/connectors/$CONNECTOR_NAME/status" 2>/dev/null || true; }

connector_state() {
  connector_status | "$PYTHON" -c '
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

register_connector() {
  local code
  code=$(curl -s -o "$CONNECT_DIR/put.out" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
    --data-binary "@$CONNECTOR_JSON" "$(connect_url)/connectors/$CONNECTOR_NAME/config") || true
  case $code in
    200 | 201) log "connector $CONNECTOR_NAME registered (HTTP $code)" ;;
    *)
      cat "$CONNECT_DIR/put.out" >&2 || true
      die "registering connector $CONNECTOR_NAME failed (HTTP $code)"
      ;;
  esac
  touch "$REGISTERED"
}

# Wait until the connector and its task are RUNNING and Debezium reads the binlog (a binlog dump
# connection other than $1, when given: the one a killed worker held).
wait_streaming() {
  local not_id=${1:-} deadline=$((SECONDS + TIMEOUT)) state reader last=""
  while :; do
    state=$(connector_state)
    case $state in
      RUNNING)
        reader=$(binlog_reader_id)
        if [[ -n $reader && $reader != "$not_id" ]]; then
          log "connector $CONNECTOR_NAME RUNNING, reading the binlog (connection $reader)"
          return 0
        fi
        state="RUNNING, waiting for the snapshot to finish / the binlog reader to start"
        ;;
      FAILED*)
        printf '%s\n' "$state" >&2
        die "connector $CONNECTOR_NAME failed (log: $CONNECT_DIR/connect.log)"
        ;;
    esac
    [[ $state == "$last" ]] || log "connector $CONNECTOR_NAME: $state"
    last=$state
    connect_pid >/dev/null || die "kafka connect process died (log: $CONNECT_DIR/connect.log)"
    ((SECONDS < deadline)) || die "connector not streaming after ${TIMEOUT}s (log: $CONNECT_DIR/connect.log)"
    sleep 1
  done
}

print_env() {
  echo "mariadb=$(db_url)"
  echo "bootstrap.servers=$(<"$KAFKA_STATE/bootstrap")"
  echo "topics=$(topics_regex)"
  echo "connect=$(connect_url)"
  echo "connector=$CONNECTOR_NAME"
  echo "converter=json"
  echo "topic_prefix=$TOPIC_PREFIX"
  echo "signal_topic=$(signal_topic)"
  echo "notification_topic=$(notification_topic)"
}

# ---------------------------------------------------------------------------------------- commands
cmd_up() {
  local init_sql=""
  while [[ $# -gt 0 ]]; do
    case $1 in
      --init-sql) init_sql=${2:?--init-sql needs a file}; shift 2 ;;
      --init-sql=*) init_sql=${1#*=}; shift ;;
      *) usage ;;
    esac
  done
  if [[ -n $init_sql ]]; then
    [[ -r $init_sql ]] || die "--init-sql $init_sql: not readable"
    init_sql=$(cd "$(dirname "$init_sql")" && pwd)/$(basename "$init_sql")
  fi
  command -v curl >/dev/null || die "curl is required"
  command -v "$PYTHON" >/dev/null || die "$PYTHON is required"
  mkdir -p "$STATE_DIR"

  db_start
  if [[ -n $init_sql ]]; then
    if [[ -f $REGISTERED ]]; then
      log "connector already registered: not running --init-sql $init_sql again"
    else
      log "running $init_sql"
      db_sql "$DB_NAME" <"$init_sql" >&2 || die "--init-sql $init_sql failed"
    fi
  fi
  kafka_start
  connect_start
  ensure_signal_table
  write_connector_json
  register_connector
  wait_streaming
  log "up in $((SECONDS - T0))s"
  print_env
}

cmd_down() {
  connect_stop
  if [[ -f $KAFKA_STATE/kafka.pid ]]; then
    kafka stop || log "kafka.sh stop failed"
  else
    log "kafka not running"
  fi
  if [[ -d $DB_DATA ]]; then
    db_stop
  else
    log "mariadb not initialised"
  fi
  log "down"
}

cmd_status() {
  local ok=0 pid line
  if pid=$(db_pid); then
    echo "mariadb: running pid=$pid $(db_url | sed 's#://\([^:]*\):[^@]*@#://\1:***@#')"
  else
    echo "mariadb: stopped"
    ok=1
  fi
  if line=$(kafka status 2>/dev/null); then
    echo "kafka: $line"
  else
    echo "kafka: stopped"
    ok=1
  fi
  if pid=$(connect_pid); then
    echo "connect: running pid=$pid $(connect_url)"
    echo "connector: $CONNECTOR_NAME $(connector_state | head -n 1) binlog_reader=$(binlog_reader_id)"
  else
    echo "connect: stopped"
    echo "connector: $CONNECTOR_NAME unknown (connect not running)"
    ok=1
  fi
  return $ok
}

cmd_restart_debezium() {
  db_pid >/dev/null || die "mariadb is not running (stack-mariadb.sh up first)"
  connect_pid >/dev/null || die "kafka connect is not running (stack-mariadb.sh up first)"
  BOOTSTRAP=$(<"$KAFKA_STATE/bootstrap")
  local old
  old=$(binlog_reader_id)
  connect_stop KILL
  connect_start
  wait_streaming "$old"
  print_env
}

cmd_env() {
  db_pid >/dev/null || die "mariadb is not running"
  connect_pid >/dev/null || die "kafka connect is not running"
  print_env
}

cmd_sql() {
  db_pid >/dev/null || die "mariadb is not running"
  db_sql "$@"
}

main() {
  case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    restart-debezium) cmd_restart_debezium ;;
    env) cmd_env ;;
    sql) shift; cmd_sql "$@" ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

# One line, read whole before it runs: editing this file while a command runs cannot make bash read on.
main "$@"; exit
