"""A client for the test API server started by ``deploy/local/kube-apiserver.sh`` (real HTTPS, real tokens)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.tooling import REPO

KUBE_APISERVER_SH = REPO / "deploy" / "local" / "kube-apiserver.sh"


class ApiError(Exception):
    """A non-2xx answer: the status and Kubernetes' Status message."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class KubeApi:
    """The API server's URL, CA and a bearer token (the admin's, or a service account's)."""

    url: str
    ca_file: Path
    token: str
    kubeconfig: Path

    @classmethod
    def from_state(cls, state_dir: Path) -> KubeApi:
        return cls(
            url=(state_dir / "url").read_text().strip(),
            ca_file=state_dir / "ca.crt",
            token=(state_dir / "admin.token").read_text().strip(),
            kubeconfig=state_dir / "kubeconfig",
        )

    def as_token(self, token: str) -> KubeApi:
        return KubeApi(self.url, self.ca_file, token, self.kubeconfig)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(  # noqa: S310 - https to the test server only
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as response:  # noqa: S310
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from exc

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def create_namespace(self, name: str) -> None:
        self.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )

    def create_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}
        self.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for the service account (TokenRequest), as the kubelet mounts one into the pod."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        token: str = answer["status"]["token"]
        return token

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
        return items


def kube_apiserver_sh(command: str, state_dir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KUBE_APISERVER_SH), command],
        env=dict(os.environ, STATE_DIR=str(state_dir)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def helm_objects(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]
