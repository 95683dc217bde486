#!/usr/bin/env bash
# Install the deployment tool chain used by tests/deploy: helm (built from the Go module proxy, pinned)
# and Debian's prometheus package (promtool + server). Idempotent: each step is skipped when the pinned
# tool is already present.
#
#   deploy/local/tools.sh install-helm        -> <repo>/.cache/bin/helm
#   deploy/local/tools.sh install-prometheus  -> /usr/bin/promtool, /usr/bin/prometheus (apt-get)
#   deploy/local/tools.sh install-kube-apiserver -> <repo>/.cache/bin/kube-apiserver (Go module proxy),
#                                                  /usr/bin/etcd (Debian's etcd-server) and the Prometheus
#                                                  operator's ServiceMonitor/PrometheusRule CRDs in .cache/crds
#   deploy/local/tools.sh all                 -> all three
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.2}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="${REPO_ROOT}/.cache/bin"

log() { printf '[tools] %s\n' "$*" >&2; }

install_helm() {
  local helm="${BIN_DIR}/helm" stamp="${BIN_DIR}/.helm-build"
  if [[ -x "${helm}" && -f "${stamp}" && "$(cat "${stamp}")" == "${HELM_VERSION}" ]]; then
    log "helm ${HELM_VERSION} already at ${helm}"
    return 0
  fi
  command -v go >/dev/null || { log "go is required to build helm"; exit 1; }
  mkdir -p "${BIN_DIR}"
  log "building helm ${HELM_VERSION} from the Go module proxy (a few minutes on a small machine)"
  # Helm's Makefile injects its version and the Kubernetes version it assumes for `helm template` /
  # `helm lint` (client-go v0.N -> Kubernetes 1.N); without them it reports a dev version and v1.20.
  local gomod k8s_minor
  gomod="$(go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  k8s_minor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "${gomod}")"
  [[ -n "${k8s_minor}" ]] || { log "cannot read the client-go version from ${gomod}"; exit 1; }
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  local pkg
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${k8s_minor}"
  done
  GOBIN="${BIN_DIR}" CGO_ENABLED=0 GOFLAGS="-buildvcs=false" go install -trimpath -ldflags "${ldflags}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  echo "${HELM_VERSION}" > "${stamp}"
  "${helm}" version --short
}

install_prometheus() {
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    log "promtool already installed: $(promtool --version 2>&1 | head -n1)"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || { log "install-prometheus needs root (apt-get)"; exit 1; }
  log "installing Debian's prometheus package"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # The package enables a system service; we only want the binaries.
  if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  promtool --version 2>&1 | head -n1
}

# kube-apiserver for tests/deploy (a real API server; no kubelet, so pods stay Pending). k8s.io/kubernetes is on
# the module proxy, but its go.mod points the k8s.io/* staging modules at ./staging/src/..., which the module
# zip leaves out (nested modules). The build therefore runs in a writable copy under .cache/build whose go.mod
# drops those replaces and requires the published staging modules at the matching v0.N.P tag instead.
install_kube_apiserver() {
  local bin="${BIN_DIR}/kube-apiserver" stamp="${BIN_DIR}/.kube-apiserver-build"
  install_etcd
  install_monitoring_crds
  if [[ -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${KUBERNETES_VERSION}" ]]; then
    log "kube-apiserver ${KUBERNETES_VERSION} already at ${bin}"
    return 0
  fi
  command -v go >/dev/null || { log "go is required to build kube-apiserver"; exit 1; }
  mkdir -p "${BIN_DIR}"
  local started=${SECONDS} moddir build staging_version
  log "building kube-apiserver ${KUBERNETES_VERSION} from the Go module proxy (nice, GOMAXPROCS=2; ~20 min on 2 cores)"
  moddir="$(GOFLAGS= go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [[ -d "${moddir}" ]] || { log "go mod download k8s.io/kubernetes@${KUBERNETES_VERSION} failed"; exit 1; }
  build="${REPO_ROOT}/.cache/build/kubernetes-${KUBERNETES_VERSION}"
  rm -rf "${build}"
  mkdir -p "${build}"
  # Only what the kube-apiserver command compiles from this module (vendor/ and test/ are not needed).
  local part
  for part in go.mod go.sum cmd pkg plugin third_party; do
    cp -r "${moddir}/${part}" "${build}/"
  done
  chmod -R u+w "${build}"
  staging_version="v0${KUBERNETES_VERSION#v1}"
  local module edits=()
  while read -r module; do
    edits+=(-dropreplace="${module}" -require="${module}@${staging_version}")
  done < <(sed -n 's/^[[:space:]]*\(k8s.io\/[a-z-]*\) => \.\/staging\/.*/\1/p' "${build}/go.mod")
  ((${#edits[@]})) || { log "no staging replaces found in ${build}/go.mod"; exit 1; }
  (cd "${build}" && GOFLAGS= go mod edit "${edits[@]}")
  local minor="${KUBERNETES_VERSION#v1.}"
  minor="${minor%%.*}"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  (cd "${build}" && GOWORK=off GOMAXPROCS=2 CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
    nice -n 10 go build -trimpath -p 2 -ldflags "${ldflags}" -o "${bin}" ./cmd/kube-apiserver)
  echo "${KUBERNETES_VERSION}" > "${stamp}"
  rm -rf "${build}"
  log "kube-apiserver built in $((SECONDS - started)) s"
  "${bin}" --version
}

# The chart's ServiceMonitor and PrometheusRule need their CRDs on the API server; the operator's module on the
# proxy carries them (example/prometheus-operator-crd), so the server validates those objects for real.
install_monitoring_crds() {
  local dir="${REPO_ROOT}/.cache/crds" moddir kind
  if [[ -f "${dir}/.version" && "$(cat "${dir}/.version")" == "${PROMETHEUS_OPERATOR_VERSION}" ]]; then
    return 0
  fi
  mkdir -p "${dir}"
  moddir="$(GOFLAGS= go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}" \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  for kind in servicemonitors prometheusrules; do
    cp "${moddir}/example/prometheus-operator-crd/monitoring.coreos.com_${kind}.yaml" "${dir}/"
  done
  chmod u+w "${dir}"/*.yaml
  echo "${PROMETHEUS_OPERATOR_VERSION}" > "${dir}/.version"
}

install_etcd() {
  if command -v etcd >/dev/null; then
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || { log "etcd needs root to install (apt-get install etcd-server)"; exit 1; }
  log "installing Debian's etcd-server package"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
  # The package enables a system service; deploy/local/kube-apiserver.sh runs its own etcd.
  if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
}

case "${1:-}" in
  install-helm) install_helm ;;
  install-prometheus) install_prometheus ;;
  install-kube-apiserver) install_kube_apiserver ;;
  all) install_helm; install_prometheus; install_kube_apiserver ;;
  *) echo "usage: $0 install-helm|install-prometheus|install-kube-apiserver|all" >&2; exit 2 ;;
esac
