#!/usr/bin/env bash
# Local end-to-end stack, no Docker: PostgreSQL (Debian packages) -> Debezium PostgreSQL connector in a
# Kafka Connect distributed worker -> single-node KRaft Kafka (deploy/local/kafka.sh).
#
#   stack.sh up [--schemas a,b] [--init-sql FILE] [--avro | --converter json|avro]
#       start (or reuse) everything, run FILE against the database before the connector is registered
#       (only the first time: never once the connector exists), register the connector, wait until the
#       connector and its task are RUNNING and Debezium is streaming, then print exactly (stdout):
#         postgres=postgresql://USER:PASSWORD@127.0.0.1:PORT/DB
#         bootstrap.servers=127.0.0.1:PORT
#         topics=REGEX                      (matches the captured tables' topics, Java and Python)
#         connect=http://127.0.0.1:PORT
#         connector=NAME
#         converter=json|avro               (the connector's key and value converter)
#         topic_prefix=PREFIX               (Debezium's topic.prefix: the key of every signal message)
#         signal_topic=PREFIX-signal        (Kafka signal channel: produce key PREFIX, value e.g.
#                                            {"type":"execute-snapshot","data":{"data-collections":
#                                            ["public.t"],"type":"incremental"}} for an incremental snapshot)
#         notification_topic=PREFIX-notifications  (Debezium's sink notifications: incremental snapshot
#                                            STARTED / IN_PROGRESS / TABLE_SCAN_COMPLETED / COMPLETED)
#       and with the Avro converter also:
#         registry.url=http://127.0.0.1:PORT                         (Apicurio Registry)
#         schema.registry.url=http://127.0.0.1:PORT/apis/ccompat/v7  (Confluent API: SchemaRegistryClient)
#       json (the default) is Kafka's JsonConverter with schemas.enable=true, set on the worker. avro is
#       Apicurio's AvroConverter (jar set connect-avro) set on the connector, in Confluent-compatible
#       mode: key and value are magic byte 0 + 4-byte big-endian schema id + Avro binary, the id is the
#       one schema.registry.url/schemas/ids/ID resolves; subjects are TOPIC-key / TOPIC-value.
#   stack.sh up --source mariadb [--init-sql FILE] [--avro | --converter json|avro]
#       the MariaDB stack instead (deploy/local/stack-mariadb.sh; it prints mariadb=mysql://... in place of
#       postgres=) in the same $STATE_DIR; every later command on that STATE_DIR goes to stack-mariadb.sh too
#       (its `sql` command included)
#
# A state dir holds one source's stack: `up` records the source in stack.env (SOURCE=postgres|mariadb), and
# `up` for the other source on it exits 1 with one message saying so (it would otherwise reuse the first
# stack's Kafka Connect state, e.g. skip --init-sql). Give each source its own STATE_DIR, e.g. the default
# <repo>/.state for Postgres and STATE_DIR=<repo>/.state-mariadb (stack-mariadb.sh's own default) for MariaDB.
#   stack.sh register-connector NAME PREFIX json|avro
#       register one more Debezium connector on the running stack (same database and schemas, its own
#       replication slot, publication and topic prefix PREFIX), e.g. an Avro twin of a JSON connector
#       for comparing both encodings of the same changes; wait until it streams, then print
#       connector=NAME, topics=REGEX, converter=..., topic_prefix=, signal_topic=, notification_topic=
#       (and the registry lines for avro)
#   stack.sh down               stop what this state dir started (Connect, Kafka, Postgres, the registry
#                               if this stack started it), by pid
#   stack.sh down --kill        the same at once: SIGKILL Connect and Kafka, Postgres in immediate mode;
#                               for a stack whose state dir is deleted next (the test suite's)
#   stack.sh status             one line per component; exit 0 when all run, 1 otherwise
#   stack.sh restart-debezium   kill -9 the Connect worker and start it again with the same config
#                               and offsets: Debezium re-sends from its last committed offset
#   stack.sh env                print the `up` lines of a running stack again
#
# Signals: every connector has the source and kafka signal channels. Incremental snapshots write their
# watermarks to a signalling table in schema debezium (never in --schemas, so no mirrored table:
# debezium.debezium_signal for the main connector, debezium.signal_<name> for each register-connector one).
# Debezium captures that table anyway and publishes the watermark rows (ids <uuid>-open / <uuid>-close) to
# PREFIX.debezium.<table>, which the topics regex does not match. incremental.snapshot.chunk.size
# is INCREMENTAL_SNAPSHOT_CHUNK_SIZE (default 100, kept in stack.env) so tests can interleave writes.
#
# Everything except those lines goes to stderr. State (data, configs, logs, pid files) lives under
# $STATE_DIR (default <repo>/.state, whichever --source): postgres/, kafka/, connect/, registry/, stack.env.
#
# Environment (defaults): STATE_DIR (<repo>/.state), JARS_DIR (<repo>/.cache/jars), PG_USER (mirror),
# PG_DB (mirror), PG_PORT / CONNECT_PORT (free ones, kept across restarts), PG_OS_USER (postgres; the
# account Postgres runs as when this script runs as root), TOPIC_PREFIX (dbserver1), CONNECTOR_NAME
# (mirror-source), INCREMENTAL_SNAPSHOT_CHUNK_SIZE (100), CONNECT_HEAP (768m), CONNECT_OFFSET_FLUSH_MS (10000: how often Connect commits
# source offsets; a restart re-sends what came after the last commit), STACK_TIMEOUT (300 seconds per
# wait), JAVA (java), LOCAL_JAVA_OPTS (more options for every JVM: Kafka, Connect, the registry; see kafka.sh),
# PYTHON (python3),
# CONVERTER (json; `up`'s converter when no flag is given; avro = --avro), REGISTRY_URL (for avro: the
# base URL http://HOST:PORT of a running Apicurio Registry 2.x; unset = `up` starts one with
# deploy/local/registry.sh under $STATE_DIR/registry and `down` stops it).
#
# A broker whose only client listener authenticates (SASL OAUTHBEARER against an OIDC provider, SASL PLAIN, ...):
# KAFKA_CLIENT_PROTOCOL and KAFKA_SERVER_PROPERTIES go to kafka.sh (the listener and its settings; see there), and
# KAFKA_CLIENT_PROPERTIES names a file of the client settings (security.protocol, sasl.*) that the Connect worker
# and every client of the connectors use (stack-lib.sh). E.g. OAUTHBEARER with Kafka's own
# org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler and the client_credentials grant:
#   security.protocol=SASL_PLAINTEXT
#   sasl.mechanism=OAUTHBEARER
#   sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
#   sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;
#   sasl.oauthbearer.token.endpoint.url=https://login.microsoftonline.com/TENANT/oauth2/v2.0/token
#   sasl.oauthbearer.client.credentials.client.id=... / ...client.secret=... / sasl.oauthbearer.scope=...
# and LOCAL_JAVA_OPTS=-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=TOKEN_URL,JWKS_URL (Kafka 4.x).
# tests/e2e/test_entra_stack_e2e.py runs the stack so against an Entra ID double.
#
# Pinned versions: Kafka 4.3.1 + Debezium 3.7.0.Final, Apicurio Registry + converter 2.6.13.Final
# (deploy/local/maven/*/pom.xml, fetched by fetch-jars.sh), PostgreSQL = the Debian release's
# `postgresql` package (15 on bookworm).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=$(realpath -m "${STATE_DIR:-$REPO_ROOT/.state}")

PG_USER=${PG_USER:-mirror}
PG_DB=${PG_DB:-mirror}
PG_OS_USER=${PG_OS_USER:-postgres}
TOPIC_PREFIX=${TOPIC_PREFIX:-dbserver1}
CONNECTOR_NAME=${CONNECTOR_NAME:-mirror-source}
SLOT_NAME=debezium_mirror
PUBLICATION_NAME=dbz_mirror
# The schema of the signalling tables: outside every captured schema (--schemas may not name it).
SIGNAL_SCHEMA=debezium

PG_DIR=$STATE_DIR/postgres
PG_DATA=$PG_DIR/data
PG_LOG=$PG_DIR/postgres.log

STACK_SCRIPT=${BASH_SOURCE[0]}
LOG_TAG=stack
CONNECT_GROUP=stack-connect
CONNECT_TOPICS=connect
CONNECT_DESC=""
STREAM_WAITING="streaming to start"
# shellcheck source=deploy/local/stack-lib.sh
source "$SCRIPT_DIR/stack-lib.sh"

# ---------------------------------------------------------------------------------------- postgres
pg_bindir() {
  local d
  d=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1)
  [[ -n $d ]] || return 1
  dirname "$d"
}

ensure_pg_installed() {
  pg_bindir >/dev/null && return 0
  [[ $(id -u) == 0 ]] || die "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); as root this script runs: apt-get install postgresql"
  log "installing PostgreSQL from Debian packages (apt-get)"
  local -a apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 update >&2
  "${apt[@]}" install postgresql-common >&2
  # This script runs its own cluster: no Debian default cluster (and so no service) is wanted.
  if [[ -f /etc/postgresql-common/createcluster.conf ]]; then
    sed -ri 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
      /etc/postgresql-common/createcluster.conf
  fi
  "${apt[@]}" install postgresql >&2
  pg_bindir >/dev/null || die "apt-get install postgresql did not provide initdb"
}

# Run a command as the account Postgres runs as (initdb and postgres refuse root).
as_pg() {
  if [[ $(id -u) == 0 ]]; then
    (cd / && runuser -u "$PG_OS_USER" -- "$@")
  else
    "$@"
  fi
}

pg_pid() {
  [[ -f $PG_DATA/postmaster.pid ]] || return 1
  local pid
  pid=$(head -n 1 "$PG_DATA/postmaster.pid")
  pid_matches "$pid" "$PG_DATA" || return 1
  echo "$pid"
}

psql_db() { # psql_db DB ARGS...
  local db=$1
  shift
  PGPASSWORD=$(env_get PG_PASSWORD) PGCONNECT_TIMEOUT=5 "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$(env_get PG_PORT)" -U "$PG_USER" -d "$db" "$@"
}

pg_init() {
  local bindir=$1 pw
  if [[ $(id -u) == 0 ]]; then
    if ! id "$PG_OS_USER" >/dev/null 2>&1; then
      log "creating system user $PG_OS_USER to run Postgres"
      useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_OS_USER"
    fi
  fi
  mkdir -p "$PG_DIR"
  chmod 700 "$PG_DIR"
  [[ $(id -u) == 0 ]] && chown "$PG_OS_USER:" "$PG_DIR"
  as_pg test -w "$PG_DIR" ||
    die "$PG_OS_USER cannot write $PG_DIR: every parent directory of STATE_DIR must be searchable (o+x) by $PG_OS_USER"

  pw=$(env_get PG_PASSWORD)
  if [[ -z $pw ]]; then
    pw=$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')
    env_set PG_PASSWORD "$pw"
  fi
  local pwfile=$PG_DIR/.pwfile
  (umask 077 && printf '%s\n' "$pw" >"$pwfile")
  [[ $(id -u) == 0 ]] && chown "$PG_OS_USER:" "$pwfile"
  log "initdb $PG_DATA (superuser $PG_USER)"
  as_pg "$bindir/initdb" -D "$PG_DATA" -U "$PG_USER" --pwfile="$pwfile" -A scram-sha-256 \
    -E UTF8 --locale=C >>"$PG_DIR/initdb.log" 2>&1 || {
    tail -n 30 "$PG_DIR/initdb.log" >&2
    die "initdb failed"
  }
  rm -f "$pwfile"
  as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null <<EOF

# ---- deploy/local/stack.sh ----
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
shared_buffers = 64MB
max_connections = 50
timezone = 'UTC'
log_timezone = 'UTC'
EOF
  as_pg tee "$PG_DATA/pg_hba.conf" >/dev/null <<EOF
# deploy/local/stack.sh: loopback TCP only, password (SCRAM) for everything, replication included
host  all          all  127.0.0.1/32  scram-sha-256
host  replication  all  127.0.0.1/32  scram-sha-256
EOF
}

pg_start() {
  ensure_pg_installed
  local bindir pid port
  bindir=$(pg_bindir)
  [[ -f $PG_DATA/PG_VERSION ]] || pg_init "$bindir"
  if pid=$(pg_pid); then
    log "postgres already running (pid $pid, port $(env_get PG_PORT))"
  else
    port=$(stable_port PG_PORT PG_PORT)
    log "starting postgres $(basename "$(dirname "$bindir")") on 127.0.0.1:$port"
    as_pg "$bindir/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -o "-p $port" -w -t 60 start >&2 || {
      tail -n 30 "$PG_LOG" >&2 || true
      die "postgres did not start"
    }
  fi
  if [[ -z $(psql_db postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'") ]]; then
    log "creating database $PG_DB"
    psql_db postgres -c "CREATE DATABASE \"$PG_DB\""
  fi
}

pg_stop() { # pg_stop [KILL]: KILL stops in immediate mode (no checkpoint: recovery at the next start)
  local pid mode=fast
  [[ ${1:-} == KILL ]] && mode=immediate
  if pid=$(pg_pid); then
    log "stopping postgres (pid $pid, $mode)"
    as_pg "$(pg_bindir)/pg_ctl" -D "$PG_DATA" -m "$mode" -w -t 60 stop >&2 ||
      { kill -TERM "$pid" 2>/dev/null || true; }
    wait_gone "$pid" 300 || log "postgres (pid $pid) still running"
  else
    log "postgres not running"
  fi
}

pg_url() {
  echo "postgresql://$PG_USER:$(env_get PG_PASSWORD)@127.0.0.1:$(env_get PG_PORT)/$PG_DB"
}

# The backend pid holding Debezium's slot ($1, default the main connector's), empty when nobody streams.
slot_active_pid() {
  psql_db "$PG_DB" -tAc "SELECT coalesce(active_pid::text, '') FROM pg_replication_slots WHERE slot_name = '${1:-$SLOT_NAME}'" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------- connect
# The worker's classpath: Connect + Debezium, plus the Avro converter once this stack uses Avro (AVRO=1).
connect_classpath() { classpath_with_avro connect-debezium; }

connect_fetch_jars() { fetch_jars_with_avro connect-debezium "$1"; } # connect_fetch_jars CLASSPATH

# wait_streaming's reader: the backend holding Debezium's slot ($1, default the main connector's).
stream_reader() { slot_active_pid "$1"; }
stream_reader_desc() { echo "streaming (slot ${2:-$SLOT_NAME} held by backend $1)"; }

# The shared commands' hooks (stack-lib.sh).
DB_LABEL=postgres
DB_DATA=$PG_DATA
READER_LABEL=slot_active_pid
db_pid() { pg_pid; }
db_url() { pg_url; }
db_stop() { pg_stop "$@"; }
db_start() { pg_start; }
db_run_sql_file() { psql_db "$PG_DB" -f "$1"; }
prepare_connector() { # prepare_connector CONVERTER: the main connector's signalling table and config
  ensure_signal_table "$(signal_table)"
  write_connector_json "$CONNECTOR_JSON" "$(env_get SCHEMAS)" "$TOPIC_PREFIX" "$SLOT_NAME" "$PUBLICATION_NAME" "$1" \
    "$(signal_table)"
}

topics_regex() { # topics_regex SCHEMAS [PREFIX]
  local prefix=${2:-$TOPIC_PREFIX}
  prefix=${prefix//./\\.}
  echo "${prefix}\\.(${1//,/|})\\..*"
}

# The signalling table (schema.table) of connector $1 (default the main one): each connector its own, since
# every connector reads every table's changes from its slot and would take another one's watermarks as its own.
signal_table() {
  local name=${1:-$CONNECTOR_NAME}
  if [[ $name == "$CONNECTOR_NAME" ]]; then
    echo "$SIGNAL_SCHEMA.debezium_signal"
  else
    echo "$SIGNAL_SCHEMA.signal_$(extra_ident "$name")"
  fi
}

# Create signalling table $1 (Debezium's layout: id, type, data) unless it exists. The publication is
# FOR ALL TABLES, so the watermarks Debezium writes to it come back through the slot.
ensure_signal_table() {
  psql_db "$PG_DB" -c "CREATE SCHEMA IF NOT EXISTS $SIGNAL_SCHEMA" \
    -c "CREATE TABLE IF NOT EXISTS $1 (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048) NULL)" ||
    die "creating the signalling table $1 failed"
}

# write_connector_json FILE SCHEMAS PREFIX SLOT PUBLICATION CONVERTER SIGNAL_TABLE
write_connector_json() {
  local file=$1 schemas=$2 prefix=$3 slot=$4 publication=$5 converter=$6 signal_table=$7
  write_connector_file "$file" "$converter" "$prefix" "$signal_table" "$(
    cat <<EOF
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": "127.0.0.1",
    "database.port": "$(env_get PG_PORT)",
    "database.user": "$PG_USER",
    "database.password": "$(env_get PG_PASSWORD)",
    "database.dbname": "$PG_DB",
    "topic.prefix": "$prefix",
    "plugin.name": "pgoutput",
    "slot.name": "$slot",
    "publication.name": "$publication",
    "publication.autocreate.mode": "all_tables",
    "schema.include.list": "$schemas",
EOF
  )"
}

print_env() {
  echo "postgres=$(pg_url)"
  echo "bootstrap.servers=$(<"$KAFKA_STATE/bootstrap")"
  echo "topics=$(topics_regex "$(env_get SCHEMAS)")"
  connector_lines
}

# Connectors added with register-connector: their names (stack.env EXTRA_CONNECTORS), slots derived.
extra_connectors() { env_get EXTRA_CONNECTORS | tr ' ' '\n' | sed '/^$/d'; }
extra_ident() { # a name as a Postgres identifier: lower case [a-z0-9_], at most 40 characters
  local id
  id=$(tr '[:upper:]' '[:lower:]' <<<"$1" | tr -c 'a-z0-9_\n' '_')
  echo "${id:0:40}"
}
extra_slot() { echo "dbz_$(extra_ident "$1")"; }
extra_reader_arg() { extra_slot "$1"; }
extra_publication() { echo "dbz_pub_$(extra_ident "$1")"; }

# ---------------------------------------------------------------------------------------- commands
cmd_up() {
  local schemas="" init_sql="" converter=${CONVERTER:-}
  while [[ $# -gt 0 ]]; do
    case $1 in
      --schemas) schemas=${2:?--schemas needs a value}; shift 2 ;;
      --schemas=*) schemas=${1#*=}; shift ;;
      --init-sql) init_sql=${2:?--init-sql needs a file}; shift 2 ;;
      --init-sql=*) init_sql=${1#*=}; shift ;;
      --avro) converter=avro; shift ;;
      --source) shift 2 ;; # postgres: delegate_source has sent mariadb to stack-mariadb.sh
      --source=*) shift ;;
      --converter) converter=${2:?--converter needs json or avro}; shift 2 ;;
      --converter=*) converter=${1#*=}; shift ;;
      *) usage ;;
    esac
  done
  schemas=${schemas:-$(env_get SCHEMAS)}
  schemas=${schemas:-public}
  [[ $schemas =~ ^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$ ]] ||
    die "--schemas takes comma-separated plain schema names, got '$schemas'"
  [[ ,$schemas, != *,$SIGNAL_SCHEMA,* ]] || die "--schemas may not name $SIGNAL_SCHEMA (the signalling tables' schema)"
  converter=$(choose_converter "$converter")
  up_stack "$converter" "$init_sql" postgres "SCHEMAS=$schemas"
}

cmd_register_connector() {
  [[ $# -eq 3 ]] || usage
  local name=$1 prefix=$2 converter=$3 schemas slot
  [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "connector name: letters, digits, _ . -; got '$name'"
  [[ $name != "$CONNECTOR_NAME" ]] || die "$name is the main connector (stack.sh up registers it)"
  [[ $prefix =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] || die "topic prefix: letters, digits, _ . -; got '$prefix'"
  [[ $converter == json || $converter == avro ]] || die "the converter is json or avro, got '$converter'"
  require_running "stack.sh up first"
  BOOTSTRAP=$(<"$KAFKA_STATE/bootstrap")
  schemas=$(env_get SCHEMAS)
  slot=$(extra_slot "$name")
  if [[ $converter == avro ]]; then
    enable_avro
    connect_start # restarts the worker when it runs without the Avro converter jars
  fi
  local file=$CONNECT_DIR/connector-$name.json
  ensure_signal_table "$(signal_table "$name")"
  write_connector_json "$file" "$schemas" "$prefix" "$slot" "$(extra_publication "$name")" "$converter" \
    "$(signal_table "$name")"
  register_connector "$name" "$file"
  if ! extra_connectors | grep -qx -- "$name"; then
    env_set EXTRA_CONNECTORS "$({ extra_connectors; echo "$name"; } | paste -sd' ' -)"
  fi
  wait_streaming "" "$name" "$slot"
  echo "connector=$name"
  echo "topics=$(topics_regex "$schemas" "$prefix")"
  echo "converter=$converter"
  signal_lines "$prefix"
  registry_lines "$converter"
}

# `up --source mariadb`, and any command on a state dir the MariaDB stack made, run stack-mariadb.sh. `up` on a
# state dir that holds the other source's stack is refused (require_source in stack-lib.sh).
delegate_source() {
  local -a rest=()
  local source
  source=$(state_source)
  if [[ ${1:-} == up ]]; then
    rest=(up)
    source=postgres
    shift
    while [[ $# -gt 0 ]]; do
      case $1 in
        --source) source=${2:?--source needs postgres or mariadb}; shift 2 ;;
        --source=*) source=${1#*=}; shift ;;
        *) rest+=("$1"); shift ;;
      esac
    done
  else
    rest=("$@")
  fi
  case ${source:-postgres} in
    postgres | postgresql) require_source postgres ;;
    mariadb | mysql)
      require_source mariadb
      exec env STATE_DIR="$STATE_DIR" bash "$SCRIPT_DIR/stack-mariadb.sh" "${rest[@]}"
      ;;
    *) die "--source is postgres or mariadb, got '$source'" ;;
  esac
}

main() {
  delegate_source "$@"
  case ${1:-} in
    up) shift; cmd_up "$@" ;;
    register-connector) shift; cmd_register_connector "$@" ;;
    down) shift; cmd_down "$@" ;;
    status) cmd_status ;;
    restart-debezium) cmd_restart_debezium ;;
    env) cmd_env ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

# One line, read whole before it runs: editing this file while a command runs cannot make bash read on.
main "$@"; exit
