"""A Microsoft Entra ID test double: short-lived RS256 access tokens for azure-identity, and their signing keys.

It plays the two endpoints azure-identity's real code reaches on a pod, so the connector is tested unmodified:

* the **managed identity** endpoint, App Service style (``GET /msi/token`` with the ``X-IDENTITY-HEADER`` secret,
  answering ``access_token`` / ``expires_on``): ``ManagedIdentityCredential`` uses it when ``IDENTITY_ENDPOINT``
  and ``IDENTITY_HEADER`` are set (``managed_identity_environment``);
* the **token endpoint** of an authority (``POST /<tenant>/oauth2/v2.0/token``, client credentials with a client
  assertion), which ``WorkloadIdentityCredential`` calls with the Kubernetes service-account token read from
  ``AZURE_FEDERATED_TOKEN_FILE`` (``workload_identity_environment``). azure-identity wants an https authority, so
  the double serves https with a throw-away certificate trusted through ``REQUESTS_CA_BUNDLE`` (the approach of
  ``tests.support.dfs_server``), and the same paths over plain http for a JVM that does not trust it.
* the same token endpoint with the **client credentials grant and a client secret** (``grant_type=client_credentials``,
  the secret in an HTTP Basic ``Authorization`` header, as Kafka's own ``OAuthBearerLoginCallbackHandler`` sends it,
  or as ``client_id`` / ``client_secret`` form fields): for platform components such as a Kafka Connect worker, whose
  application the test registers with ``add_client(client_id, secret)``. A wrong secret gets Entra's
  ``invalid_client`` (AADSTS7000215).

Tokens are JWTs signed with the double's RSA key (``kid`` in the header), with ``aud`` (the scope without
``/.default``, as Entra issues them), ``iss`` (``<authority>/<tenant>/v2.0``), ``sub``/``oid``/``appid`` (the
identity), ``iat``/``nbf``/``exp``; their life is ``token_lifetime_s`` (60 s unless a test shortens it). The public
key is served as a JWKS at ``/keys``, for a broker to validate them. An identity can be refused
(``refuse(client_id)``): its requests get Entra's error answers (400 with ``error`` / ``error_description``).
Every token issued is counted per identity (``issued``).
"""

from __future__ import annotations

import base64
import hmac
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.support.dfs_server import _certificate
from tests.support.served_http import ServedHttp

TENANT_ID = "72f988bf-0000-4000-8000-000000000001"
#: The secret App Service hands its apps in IDENTITY_HEADER; the double checks it as App Service does.
IDENTITY_HEADER = "entra-double-identity-header"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class EntraDouble:
    """The double's state: its signing key, its token life, the refused identities, the tokens issued."""

    def __init__(self, token_lifetime_s: float = 60.0) -> None:
        self.token_lifetime_s = token_lifetime_s
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:16]
        self.issued: Counter[str] = Counter()
        self.refused: set[str] = set()
        self._client_secrets: dict[str, str] = {}
        self._lock = threading.Lock()
        self._https: ServedHttp | None = None
        self._http: ServedHttp | None = None
        self.ca_file = str(_certificate()[0])

    # -- lifecycle

    def start(self) -> EntraDouble:
        cert, key = _certificate()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        https = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        https.socket = context.wrap_socket(https.socket, server_side=True)
        self._https = ServedHttp(https, "entra-double-https")
        self._http = ServedHttp(ThreadingHTTPServer(("127.0.0.1", 0), _handler(self)), "entra-double-http")
        return self

    def stop(self) -> None:
        for served in (self._https, self._http):
            if served is not None:
                served.close()

    def __enter__(self) -> EntraDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses

    @property
    def authority(self) -> str:
        """The https authority host (``AZURE_AUTHORITY_HOST``)."""
        assert self._https is not None, "start the double first"
        return f"https://127.0.0.1:{self._https.port}"

    @property
    def http_url(self) -> str:
        """The same endpoints over plain http (for the broker's JWKS fetch)."""
        assert self._http is not None, "start the double first"
        return f"http://127.0.0.1:{self._http.port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.http_url}/keys"

    @property
    def issuer(self) -> str:
        return f"{self.authority}/{TENANT_ID}/v2.0"

    # -- behaviour

    def add_client(self, client_id: str, secret: str) -> None:
        """Register an application that may use the client credentials grant with ``secret``."""
        with self._lock:
            self._client_secrets[client_id] = secret

    def secret_matches(self, client_id: str, secret: str) -> bool:
        with self._lock:
            known = self._client_secrets.get(client_id)
        return known is not None and hmac.compare_digest(known, secret)

    @property
    def token_endpoint_http(self) -> str:
        """The tenant's token endpoint over plain http (for a JVM client: Kafka Connect's login handler)."""
        return f"{self.http_url}/{TENANT_ID}/oauth2/v2.0/token"

    def refuse(self, identity: str) -> None:
        """Answer ``identity``'s token requests with Entra's errors from now on."""
        with self._lock:
            self.refused.add(identity)

    def token(self, identity: str, resource: str) -> tuple[str, int]:
        """A signed access token for ``identity`` with audience ``resource``, and its expiry (epoch seconds)."""
        now = int(time.time())
        expires = now + max(1, int(self.token_lifetime_s))
        claims = {
            "aud": resource,
            "iss": self.issuer,
            "sub": identity,
            "oid": identity,
            "appid": identity,
            "tid": TENANT_ID,
            "iat": now,
            "nbf": now - 5,
            "exp": expires,
            "uti": uuid.uuid4().hex,  # each token its own, as Entra's
        }
        with self._lock:
            self.issued[identity] += 1
        return self._sign(claims), expires

    def _sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
        return {
            "keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid, "n": _b64url(n), "e": _b64url(e)}]
        }

    def is_refused(self, identity: str) -> bool:
        with self._lock:
            return identity in self.refused

    # -- environments for azure-identity

    def managed_identity_environment(self) -> dict[str, str]:
        """What App Service gives an app with a managed identity, pointed at this double."""
        return {
            "IDENTITY_ENDPOINT": f"{self.authority}/msi/token",
            "IDENTITY_HEADER": IDENTITY_HEADER,
            "REQUESTS_CA_BUNDLE": self.ca_file,
        }

    def workload_identity_environment(self, client_id: str, token_file: Path) -> dict[str, str]:
        """What the AKS workload-identity webhook gives a pod, pointed at this double (the token file written)."""
        token_file.write_text(self._service_account_token())
        return {
            "AZURE_AUTHORITY_HOST": self.authority,
            "AZURE_CLIENT_ID": client_id,
            "AZURE_TENANT_ID": TENANT_ID,
            "AZURE_FEDERATED_TOKEN_FILE": str(token_file),
            "REQUESTS_CA_BUNDLE": self.ca_file,
        }

    def _service_account_token(self) -> str:
        # What Kubernetes projects into the pod: a JWT whose subject is the service account. The double accepts any
        # assertion for a client id it does not refuse (it does not play the federation check itself).
        now = int(time.time())
        subject = "system:serviceaccount:cdc:debezium-fabric-mirror"
        return self._sign({"sub": subject, "aud": "api://AzureADTokenExchange", "iat": now, "exp": now + 3600})


def _handler(double: EntraDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(_EntraHandler):
        entra = double

    return Handler


class _EntraHandler(BaseHTTPRequestHandler):
    entra: EntraDouble
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        """Stay quiet: pytest shows failures, not every request."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/keys":
            self._json(200, self.entra.jwks())
        elif url.path == "/msi/token":
            self._managed_identity(query)
        elif url.path.endswith("/.well-known/openid-configuration"):
            tenant = url.path.strip("/").split("/")[0]
            base = f"{self.entra.authority}/{tenant}"
            self._json(
                200,
                {
                    "issuer": f"{base}/v2.0",
                    "token_endpoint": f"{base}/oauth2/v2.0/token",
                    "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                    "jwks_uri": f"{self.entra.authority}/keys",
                },
            )
        else:
            self._json(404, {"error": "not_found", "error_description": url.path})

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        if not url.path.endswith("/oauth2/v2.0/token"):
            self._json(404, {"error": "not_found", "error_description": url.path})
            return
        if form.get("grant_type") == "client_credentials" and not form.get("client_assertion"):
            self._client_secret_grant(form)
            return
        client_id = form.get("client_id", "")
        if not form.get("client_assertion") or self.entra.is_refused(client_id):
            description = (
                f"AADSTS700213: No matching federated identity record found for presented assertion subject "
                f"'system:serviceaccount:cdc:debezium-fabric-mirror' of application {client_id}."
            )
            self._json(400, {"error": "invalid_client", "error_description": description, "error_codes": [700213]})
            return
        self._issue(client_id, form)

    def _issue(self, client_id: str, form: dict[str, str]) -> None:
        resource = form.get("scope", "").split(" ")[0].removesuffix("/.default")
        token, expires = self.entra.token(client_id, resource)
        lifetime = expires - int(time.time())
        self._json(
            200, {"token_type": "Bearer", "expires_in": lifetime, "ext_expires_in": lifetime, "access_token": token}
        )

    def _client_secret_grant(self, form: dict[str, str]) -> None:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        authorization = self.headers.get("Authorization", "")
        if authorization.startswith("Basic "):
            try:
                client_id, _, secret = base64.b64decode(authorization.removeprefix("Basic ")).decode().partition(":")
            except ValueError:
                client_id, secret = "", ""
        if not self.entra.secret_matches(client_id, secret) or self.entra.is_refused(client_id):
            description = f"AADSTS7000215: Invalid client secret provided for application {client_id}."
            self._json(401, {"error": "invalid_client", "error_description": description, "error_codes": [7000215]})
            return
        self._issue(client_id, form)

    def _managed_identity(self, query: dict[str, str]) -> None:
        if self.headers.get("X-IDENTITY-HEADER") != IDENTITY_HEADER:
            self._json(401, {"statusCode": 401, "message": "X-IDENTITY-HEADER missing or wrong"})
            return
        identity = query.get("client_id") or "system-assigned"
        if self.entra.is_refused(identity):
            message = f"No managed identity found for client id {identity}"
            self._json(400, {"statusCode": 400, "message": message, "correlationId": str(uuid.uuid4())})
            return
        resource = query.get("resource", "")
        token, expires = self.entra.token(identity, resource)
        body = {
            "access_token": token,
            "expires_on": str(expires),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": identity,
        }
        self._json(200, body)

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def entra_double(token_lifetime_s: float = 60.0) -> Iterator[EntraDouble]:
    """A running double, stopped afterwards."""
    with EntraDouble(token_lifetime_s) as double:
        yield double
