#!/usr/bin/env bash
# Install the deployment tool chain used by tests/deploy: helm (built from the Go module proxy, pinned)
# and Debian's prometheus package (promtool + server). Idempotent: each step is skipped when the pinned
# tool is already present.
#
#   deploy/local/tools.sh install-helm        -> <repo>/.cache/bin/helm
#   deploy/local/tools.sh install-prometheus  -> /usr/bin/promtool, /usr/bin/prometheus (apt-get)
#   deploy/local/tools.sh all                 -> both
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
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

case "${1:-}" in
  install-helm) install_helm ;;
  install-prometheus) install_prometheus ;;
  all) install_helm; install_prometheus ;;
  *) echo "usage: $0 install-helm|install-prometheus|all" >&2; exit 2 ;;
esac
