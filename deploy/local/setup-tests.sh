#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, idempotently:
#   Debian packages (PostgreSQL and MariaDB for the end-to-end stacks, Prometheus for promtool and the server,
#   chromium and chromium-driver for the status page's browser test),
#   the project in .venv with the locked set of requirements/test.txt (runtime, verify and test extras: psycopg,
#   PyMySQL, deltalake, pytest, ruff, mypy, uv), the jar sets from Maven Central (Kafka broker,
#   Spark's Kafka source, Kafka Connect + Debezium (Postgres; MariaDB in a set of its own), Apicurio's
#   Avro converter for Connect, and the Apicurio Registry application for deploy/local/registry.sh),
#   helm and kube-apiserver built from the Go module proxy (kube-apiserver: about 20 minutes on 2 cores the
#   first time, then cached in .cache/bin) and Debian's etcd-server for deploy/local/kube-apiserver.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${REPO_ROOT}"
log() { printf '[setup-tests] %s\n' "$*" >&2; }

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql postgresql-contrib)
command -v promtool >/dev/null || missing+=(prometheus)
command -v mariadb-install-db >/dev/null || missing+=(mariadb-server mariadb-client)
command -v etcd >/dev/null || missing+=(etcd-server)
# Headless Chromium and its WebDriver for the status page's browser test (driven by Selenium from requirements).
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Installing postgresql must not create and start a default cluster: the stack makes its own.
  mkdir -p /etc/postgresql-common
  if ! grep -qs '^create_main_cluster *= *false' /etc/postgresql-common/createcluster.conf; then
    echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Likewise mariadb-server's service (port 3306, /var/lib/mysql): deploy/local/stack-mariadb.sh runs its own.
  if [[ " ${missing[*]} " == *" mariadb-server "* ]]; then
    if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
      systemctl disable --now mariadb.service >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/mariadb ]]; then
      /etc/init.d/mariadb stop >/dev/null 2>&1 || true
      update-rc.d mariadb disable >/dev/null 2>&1 || true
    fi
  fi
  # And etcd-server's: deploy/local/kube-apiserver.sh runs its own etcd on free ports.
  if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    systemctl disable --now etcd.service >/dev/null 2>&1 || true
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  python3 -m venv .venv
fi
# The project itself without resolving (first, so an existing .venv's old metadata does not make pip report
# conflicts), then the locked set (requirements/test.txt: every version and hash).
log "pip install -e . --no-deps, then -r requirements/test.txt"
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q --no-deps -e .
.venv/bin/pip install -q --require-hashes -r requirements/test.txt
# Spark's bundled pyspark/py4j zips duplicate the installed packages, uncompiled: without them the Python processes
# Spark starts to plan the Kafka source import pyspark compiled (connector/spark/installed_pyspark.py).
.venv/bin/python -m connector.spark.installed_pyspark

log "jar sets from Maven Central"
bash deploy/local/fetch-jars.sh kafka spark-kafka connect-debezium connect-debezium-mariadb connect-avro apicurio-registry

# axe-core from the npm registry, for the status page's browser test (injected into the page with Selenium):
# version and integrity pinned, cached as .cache/axe-core/axe.min.js with its version beside it.
AXE_VERSION=4.14.1
AXE_INTEGRITY='sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=='
if [[ "$(cat .cache/axe-core/VERSION 2>/dev/null)" != "${AXE_VERSION}" || ! -s .cache/axe-core/axe.min.js ]]; then
  log "axe-core ${AXE_VERSION} from the npm registry"
  axe_tmp="$(mktemp -d)"
  packed="$(cd "${axe_tmp}" && npm pack --silent --json "axe-core@${AXE_VERSION}")"
  grep -qF "\"integrity\": \"${AXE_INTEGRITY}\"" <<<"${packed}" || { log "axe-core: integrity differs"; exit 1; }
  tar -xzf "${axe_tmp}/axe-core-${AXE_VERSION}.tgz" -C "${axe_tmp}" package/axe.min.js
  mkdir -p .cache/axe-core
  mv "${axe_tmp}/package/axe.min.js" .cache/axe-core/axe.min.js
  echo "${AXE_VERSION}" >.cache/axe-core/VERSION
  rm -rf "${axe_tmp}"
fi

log "helm, promtool, etcd and kube-apiserver"
bash deploy/local/tools.sh all
log "ready"
