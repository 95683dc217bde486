#!/usr/bin/env bash
# A real Kubernetes API server for the deployment tests: Debian's etcd and kube-apiserver built from the Go
# module proxy (deploy/local/tools.sh install-kube-apiserver), no Docker, no kubelet (pods stay Pending),
# no controller manager (a StatefulSet creates no pod, a deleted namespace stays Terminating).
#
#   kube-apiserver.sh start    start (or reuse) etcd and the API server; prints exactly one stdout line:
#                                kubeconfig=<STATE_DIR>/kubeconfig
#   kube-apiserver.sh stop     stop the two processes started from this state dir (pid files only)
#   kube-apiserver.sh status   "running https://127.0.0.1:PORT" (exit 0) or "stopped" (exit 1)
#
# STATE_DIR (default <repo>/.state/kube-apiserver) holds etcd's data, the pid files, the logs and:
#   kubeconfig       cluster-admin (system:masters) through a static token, for helm and the tests
#   admin.token      that token
#   ca.crt           the CA that signed the serving certificate (127.0.0.1, localhost, kubernetes.default.svc)
#   sa.key, sa.pub   the service-account signing key: TokenRequest (serviceaccounts/<name>/token) issues
#                    tokens that the RBAC authorizer maps to system:serviceaccount:<ns>:<name>
#   url              https://127.0.0.1:PORT
# Environment: KUBE_APISERVER (default <repo>/.cache/bin/kube-apiserver), ETCD (default etcd on PATH),
# KUBE_APISERVER_PORT / ETCD_PORT (default free ones), KUBE_APISERVER_START_TIMEOUT (seconds, default 120).
# Everything except the kubeconfig line goes to stderr.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=${STATE_DIR:-$REPO_ROOT/.state/kube-apiserver}
KUBE_APISERVER=${KUBE_APISERVER:-$REPO_ROOT/.cache/bin/kube-apiserver}
ETCD=${ETCD:-etcd}
START_TIMEOUT=${KUBE_APISERVER_START_TIMEOUT:-120}

ETCD_PID=$STATE_DIR/etcd.pid
APISERVER_PID=$STATE_DIR/kube-apiserver.pid
URL_FILE=$STATE_DIR/url
KUBECONFIG_FILE=$STATE_DIR/kubeconfig

log() { echo "kube-apiserver.sh: $*" >&2; }

# shellcheck source=deploy/local/ports.sh
source "$SCRIPT_DIR/ports.sh"

# The pid from pid file $1 if that process is alive and its command line contains $2 (guards against pid reuse).
running_pid() {
  local file=$1 marker=$2 pid cmdline
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$marker"* ]] || return 1
  echo "$pid"
}

etcd_pid() { running_pid "$ETCD_PID" "$STATE_DIR/etcd-data"; }
apiserver_pid() { running_pid "$APISERVER_PID" "$STATE_DIR/tokens.csv"; }

# A CA, a serving certificate signed by it, the service-account key pair and the admin token; kept across
# restarts of the same state dir.
write_credentials() {
  [[ -f $STATE_DIR/admin.token ]] && return 0
  local d=$STATE_DIR
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=test-kubernetes-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$d/serving.key" \
    -out "$d/serving.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' \
    >"$d/serving.ext"
  openssl x509 -req -in "$d/serving.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/serving.ext" -out "$d/serving.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  local token
  token=$(openssl rand -hex 32)
  # token,user,uid,"group1,group2"
  printf '%s,admin,admin,"system:masters"\n' "$token" >"$d/tokens.csv"
  chmod 600 "$d"/*.key "$d/tokens.csv"
  printf '%s' "$token" >"$d/admin.token"
  chmod 600 "$d/admin.token"
}

write_kubeconfig() {
  local url=$1
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: $url
      certificate-authority: $STATE_DIR/ca.crt
users:
  - name: admin
    user:
      token: $(<"$STATE_DIR/admin.token")
contexts:
  - name: test
    context: {cluster: test, user: admin, namespace: default}
current-context: test
EOF
  chmod 600 "$KUBECONFIG_FILE"
}

ready() {
  local url=$1
  curl -fsS --max-time 5 --cacert "$STATE_DIR/ca.crt" -H "Authorization: Bearer $(<"$STATE_DIR/admin.token")" \
    "$url/readyz" >/dev/null 2>&1
}

start() {
  mkdir -p "$STATE_DIR"
  if apiserver_pid >/dev/null && etcd_pid >/dev/null; then
    log "already running at $(<"$URL_FILE")"
    echo "kubeconfig=$KUBECONFIG_FILE"
    return 0
  fi
  stop_all
  [[ -x $KUBE_APISERVER ]] || { log "$KUBE_APISERVER missing: run deploy/local/tools.sh install-kube-apiserver"; exit 1; }
  command -v "$ETCD" >/dev/null || { log "etcd missing: run deploy/local/tools.sh install-kube-apiserver"; exit 1; }
  write_credentials
  local etcd_port etcd_peer_port port
  etcd_port=${ETCD_PORT:-$(free_port)}
  etcd_peer_port=$(free_port "$etcd_port")
  port=${KUBE_APISERVER_PORT:-$(free_port "$etcd_port")}
  [[ $port != "$etcd_peer_port" ]] || port=$(free_port "$etcd_peer_port")

  log "etcd on 127.0.0.1:$etcd_port"
  "$ETCD" --name test --data-dir "$STATE_DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "test=http://127.0.0.1:$etcd_peer_port" \
    >"$STATE_DIR/etcd.log" 2>&1 &
  local etcd_launched=$!
  echo "$etcd_launched" >"$ETCD_PID"

  local url="https://127.0.0.1:$port"
  log "kube-apiserver on $url"
  "$KUBE_APISERVER" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --tls-cert-file "$STATE_DIR/serving.crt" --tls-private-key-file "$STATE_DIR/serving.key" \
    --token-auth-file "$STATE_DIR/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$STATE_DIR/sa.pub" --service-account-signing-key-file "$STATE_DIR/sa.key" \
    --authorization-mode RBAC \
    --service-cluster-ip-range 10.96.0.0/16 \
    --cert-dir "$STATE_DIR/certs" \
    >"$STATE_DIR/kube-apiserver.log" 2>&1 &
  local apiserver_launched=$!
  echo "$apiserver_launched" >"$APISERVER_PID"
  echo "$url" >"$URL_FILE"
  write_kubeconfig "$url"

  local deadline=$((SECONDS + START_TIMEOUT))
  # The launched pids, not apiserver_pid/etcd_pid: until a child has exec'd its binary (a while on a loaded
  # machine) its command line is still this script's, which the pid-reuse guard would take for a dead process.
  until ready "$url"; do
    if ! kill -0 "$apiserver_launched" 2>/dev/null || ! kill -0 "$etcd_launched" 2>/dev/null ||
      ((SECONDS > deadline)); then
      log "not ready (see $STATE_DIR/kube-apiserver.log and etcd.log):"
      tail -n 20 "$STATE_DIR/kube-apiserver.log" "$STATE_DIR/etcd.log" >&2 || true
      terminate_pid "$apiserver_launched" kube-apiserver
      terminate_pid "$etcd_launched" etcd
      rm -f "$APISERVER_PID" "$ETCD_PID"
      exit 1
    fi
    sleep 1
  done
  log "ready"
  echo "kubeconfig=$KUBECONFIG_FILE"
}

stop_all() {
  local pid
  if pid=$(apiserver_pid); then terminate_pid "$pid" kube-apiserver; fi
  if pid=$(etcd_pid); then terminate_pid "$pid" etcd; fi
  rm -f "$APISERVER_PID" "$ETCD_PID"
}

status() {
  if apiserver_pid >/dev/null && etcd_pid >/dev/null; then
    echo "running $(<"$URL_FILE")"
    return 0
  fi
  echo stopped
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop_all ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
