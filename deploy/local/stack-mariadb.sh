#!/usr/bin/env bash
# Local end-to-end stack for the second source, no Docker: MariaDB (Debian's mariadb-server) -> Debezium
# MariaDB connector in its own Kafka Connect distributed worker -> single-node KRaft Kafka (kafka.sh).
# The Postgres stack (stack.sh) is the sibling; `stack.sh up --source mariadb` runs this script.
#
#   stack-mariadb.sh up [--init-sql FILE] [--avro | --converter json|avro]
#       start (or reuse) everything, run FILE against the database before the connector is registered
#       (only the first time), register the connector, wait until the connector and its task are
#       RUNNING and Debezium reads the binlog, then print exactly (stdout):
#         mariadb=mysql://USER:PASSWORD@127.0.0.1:PORT/DB
#         bootstrap.servers=127.0.0.1:PORT
#         topics=REGEX                      (matches the captured tables' topics, Java and Python)
#         connect=http://127.0.0.1:PORT
#         connector=NAME
#         converter=json|avro               (the connector's key and value converter)
#         topic_prefix=PREFIX               (Debezium's topic.prefix: the key of every signal message)
#         signal_topic=PREFIX-signal        (Kafka signal channel: produce key PREFIX, value e.g.
#                                            {"type":"execute-snapshot","data":{"data-collections":
#                                            ["mirror.t"],"type":"incremental"}} for an incremental snapshot)
#         notification_topic=PREFIX-notifications  (Debezium's sink notifications: incremental snapshot
#                                            STARTED / IN_PROGRESS / TABLE_SCAN_COMPLETED / COMPLETED)
#       and with the Avro converter also:
#         registry.url=http://127.0.0.1:PORT                         (Apicurio Registry)
#         schema.registry.url=http://127.0.0.1:PORT/apis/ccompat/v7  (Confluent API: source.schema_registry.url)
#       json (the default) is Kafka's JsonConverter with schemas.enable=true, set on the worker. avro is
#       Apicurio's AvroConverter set on the connector exactly as stack.sh sets it (stack-lib.sh,
#       converter_settings_json): Confluent-compatible mode, key and value are magic byte 0 + 4-byte
#       big-endian schema id + Avro binary, subjects TOPIC-key / TOPIC-value, schema and field names adjusted
#       for Avro. The worker then runs with the jar set connect-avro on its classpath too (restarted if
#       needed); the choice is kept in stack.env for later `up`s.
#   stack-mariadb.sh down               stop what this state dir started (Connect, Kafka, MariaDB, the
#                                       registry it started), by pid
#   stack-mariadb.sh down --kill        the same at once (SIGKILL): for a stack whose state dir is deleted next
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
# $STATE_DIR: mariadb/, kafka/, connect/, registry/ (avro), stack.env. Its default is <repo>/.state-mariadb when
# this script runs directly; `stack.sh up --source mariadb` passes stack.sh's STATE_DIR (default <repo>/.state),
# so set STATE_DIR=<repo>/.state-mariadb there to get the same folder. A state dir holds one source's stack:
# `up` records SOURCE=mariadb in stack.env, and every command (here or through stack.sh) on a state dir holding
# the Postgres stack exits 1 with one message saying so.
#
# Environment (defaults): STATE_DIR (<repo>/.state-mariadb run directly, <repo>/.state through stack.sh), JARS_DIR (<repo>/.cache/jars), MARIADB_USER
# (mirror), MARIADB_DB (mirror), MARIADB_PORT / CONNECT_PORT (free ones, kept across restarts),
# MARIADB_OS_USER (mysql; the account MariaDB runs as when this script runs as root), TOPIC_PREFIX
# (mariadb1), CONNECTOR_NAME (mirror-source-mariadb), INCREMENTAL_SNAPSHOT_CHUNK_SIZE (100), CONNECT_HEAP (768m), CONNECT_OFFSET_FLUSH_MS (10000),
# STACK_TIMEOUT (300 seconds per wait), JAVA (java), LOCAL_JAVA_OPTS (see stack.sh), PYTHON (python3), CONVERTER (json; `up`'s converter when
# no flag is given), REGISTRY_URL (for avro: the base URL http://HOST:PORT of a running Apicurio Registry 2.x;
# unset = `up` starts one with deploy/local/registry.sh under $STATE_DIR/registry and `down` stops it).
#
# Pinned versions: Kafka 4.3.1 + Debezium MariaDB connector 3.5.0.Final (the newest Maven Central serves;
# deploy/local/maven/connect-debezium-mariadb/pom.xml, a worker classpath of its own because the Postgres
# set's Debezium 3.7.0 core cannot share it), MariaDB = the Debian release's `mariadb-server` (10.11 on bookworm).
# The Avro converter is the Postgres stack's jar set connect-avro (Apicurio 2.6.13.Final) unchanged: it excludes
# Kafka, Jackson and slf4j, which this worker's set provides at the same versions (Kafka 4.3.1, Jackson 2.21).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=$(realpath -m "${STATE_DIR:-$REPO_ROOT/.state-mariadb}")

DB_USER=${MARIADB_USER:-mirror}
DB_NAME=${MARIADB_DB:-mirror}
DB_OS_USER=${MARIADB_OS_USER:-mysql}
TOPIC_PREFIX=${TOPIC_PREFIX:-mariadb1}
CONNECTOR_NAME=${CONNECTOR_NAME:-mirror-source-mariadb}
JAR_SET=connect-debezium-mariadb
# Debezium joins the binlog as a replica: its server id must differ from the server's (1).
DEBEZIUM_SERVER_ID=5401
# The signalling table, in a database of its own (not in database.include.list).
SIGNAL_DB=debezium
SIGNAL_TABLE=$SIGNAL_DB.debezium_signal

DB_DIR=$STATE_DIR/mariadb
DB_DATA=$DB_DIR/data
DB_CNF=$DB_DIR/my.cnf
DB_SOCK=$DB_DIR/mariadb.sock
DB_PIDFILE=$DB_DIR/mariadb.pid
DB_LOG=$DB_DIR/mariadb.err

STACK_SCRIPT=${BASH_SOURCE[0]}
LOG_TAG=stack-mariadb
CONNECT_GROUP=stack-connect-mariadb
CONNECT_TOPICS=connect-mariadb
CONNECT_DESC=", jar set $JAR_SET"
STREAM_WAITING="the binlog reader to start"
# shellcheck source=deploy/local/stack-lib.sh
source "$SCRIPT_DIR/stack-lib.sh"

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
    port=$(stable_port MARIADB_PORT DB_PORT)
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

db_stop() { # db_stop [KILL]
  local pid signal=${1:-TERM}
  if pid=$(db_pid); then
    log "stopping mariadb (pid $pid, SIG$signal)"
    kill "-$signal" "$pid" 2>/dev/null || true
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

# ---------------------------------------------------------------------------------------- connect
# The worker's classpath: Connect + Debezium MariaDB, plus the Avro converter once this stack uses Avro (AVRO=1).
connect_classpath() { classpath_with_avro "$JAR_SET"; }

connect_fetch_jars() { fetch_jars_with_avro "$JAR_SET" "$1"; } # connect_fetch_jars CLASSPATH

# wait_streaming's reader: Debezium's binlog dump connection.
stream_reader() { binlog_reader_id; }
stream_reader_desc() { echo "reading the binlog (connection $1)"; }

# The shared commands' hooks (stack-lib.sh); db_pid, db_url and db_stop are above.
DB_LABEL=mariadb
READER_LABEL=binlog_reader
db_run_sql_file() { db_sql "$DB_NAME" <"$1"; }
prepare_connector() { # prepare_connector CONVERTER
  ensure_signal_table
  write_connector_json "$1"
}

# The tables' topics, and the schema change topic (named topic.prefix): the connector acts on a DDL when it is read.
# Anchored: Spark's subscribePattern finds the pattern anywhere in a topic name, and the bare prefix would also
# take the heartbeat, signal and schema history topics.
topics_regex() {
  local prefix=${TOPIC_PREFIX//./\\.}
  echo "^${prefix}(\\.${DB_NAME}\\..*)?\$"
}

# Create the signalling table (Debezium's layout: id, type, data) unless it exists.
ensure_signal_table() {
  db_sql <<EOF || die "creating the signalling table $SIGNAL_TABLE failed"
CREATE DATABASE IF NOT EXISTS \`$SIGNAL_DB\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE TABLE IF NOT EXISTS $SIGNAL_TABLE (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL);
EOF
}

write_connector_json() { # write_connector_json CONVERTER
  write_connector_file "$CONNECTOR_JSON" "$1" "$TOPIC_PREFIX" "$SIGNAL_TABLE" "$(
    cat <<EOF
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
    "include.schema.changes": "true",
    "bigint.unsigned.handling.mode": "precise",
EOF
  )"
}

print_env() {
  echo "mariadb=$(db_url)"
  echo "bootstrap.servers=$(<"$KAFKA_STATE/bootstrap")"
  echo "topics=$(topics_regex)"
  connector_lines
}

# ---------------------------------------------------------------------------------------- commands
cmd_up() {
  local init_sql="" converter=${CONVERTER:-}
  while [[ $# -gt 0 ]]; do
    case $1 in
      --init-sql) init_sql=${2:?--init-sql needs a file}; shift 2 ;;
      --init-sql=*) init_sql=${1#*=}; shift ;;
      --avro) converter=avro; shift ;;
      --converter) converter=${2:?--converter needs json or avro}; shift 2 ;;
      --converter=*) converter=${1#*=}; shift ;;
      *) usage ;;
    esac
  done
  converter=$(choose_converter "$converter")
  up_stack "$converter" "$init_sql" mariadb
}

cmd_sql() {
  db_pid >/dev/null || die "mariadb is not running"
  db_sql "$@"
}

main() {
  case ${1:-} in -h | --help | help | "") ;; *) require_source mariadb ;; esac
  case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
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
