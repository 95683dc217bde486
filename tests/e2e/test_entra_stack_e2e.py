"""Postgres -> Debezium -> a Kafka broker that takes only Microsoft Entra ID tokens -> ``run``, and ``verify``.

The stack of ``deploy/local/stack.sh`` with its broker's only client listener SASL OAUTHBEARER (``kafka.sh``'s
``KAFKA_CLIENT_PROTOCOL`` / ``KAFKA_SERVER_PROPERTIES``): Kafka's own ``OAuthBearerValidatorCallbackHandler`` checks
every token's signature against the JWKS of an **Entra ID double** (``tests.support.entra_double``), its audience,
issuer and expiry, and ends a session whose token expired unless the client re-authenticated. Tokens live 60 s.

- Kafka Connect and every Kafka client Debezium makes (producer, consumer, admin, the Kafka signal channel's
  consumer) log in with Kafka's own ``OAuthBearerLoginCallbackHandler``: the client credentials grant with a client
  secret at the double's token endpoint (``KAFKA_CLIENT_PROPERTIES``). Connect is the platform's component: a
  secret there is the platform's business.
- ``run`` authenticates with azure-identity's workload identity (the federated token file), with no password in its
  config or environment, while a trickle of changes goes on for more than two token lives: the mirror is exact
  (``verify``), the log has no error line, no batch waited much longer than a trigger, and the double issued fresh
  tokens to both identities.
- A second ``run`` on the same landing zone and checkpoint with an identity Entra refuses ends in one ``error:`` line
  naming the identity and the broker; its ``/readyz`` never says ready; nothing already published changes.

A SASL PLAIN broker is ``tests/integration/test_preflight_kafka``'s; the clients' token refresh in detail (both
azure-identity flows, 10 s tokens) is ``tests/integration/test_kafka_entra``'s.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from connector.readback.verify import verify
from tests.e2e.conftest import _stack_up, _state_dir
from tests.support.entra_double import EntraDouble
from tests.support.kafka import REPO_ROOT, run_connector
from tests.support.oauth_kafka import free_port

pytestmark = [pytest.mark.e2e]

AUDIENCE = "https://cdc-entra-stack.servicebus.windows.net"
SCOPE = f"{AUDIENCE}/.default"
TOKEN_LIFE_S = 60
#: The Connect worker's application (client credentials with a secret) and the connector's workload identity.
CONNECT_CLIENT = "kafka-connect-worker"
MIRROR_CLIENT = "cdc-mirror-workload"
REFUSED_CLIENT = "cdc-mirror-not-federated"
TABLE = "entra_items"
SNAPSHOT_ROWS = 300
TRIGGER_S = 2
#: The longest wait between two batches while changes flow that still counts as no stall: a trigger, plus a
#: batch's own time on this loaded 2-core machine (Postgres, Kafka, Connect and Spark share it).
STALL_BOUND_S = 3 * TRIGGER_S
_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

INIT_SQL = f"""
CREATE TABLE public.{TABLE} (
    id integer PRIMARY KEY,
    name text NOT NULL,
    qty integer NOT NULL,
    price numeric(12, 2),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO public.{TABLE} (id, name, qty, price)
SELECT i, 'item ' || i, i % 17, (i * 1.25)::numeric(12, 2) FROM generate_series(1, {SNAPSHOT_ROWS}) AS i;
"""


@pytest.fixture(scope="module")
def entra() -> Iterator[EntraDouble]:
    with EntraDouble(token_lifetime_s=TOKEN_LIFE_S) as double:
        yield double


@pytest.fixture(scope="module")
def connect_secret(entra: EntraDouble) -> str:
    secret = secrets.token_urlsafe(24)
    entra.add_client(CONNECT_CLIENT, secret)
    return secret


@pytest.fixture(scope="module")
def entra_stack(entra: EntraDouble, connect_secret: str) -> Iterator[dict[str, str]]:
    """The Postgres stack (its own state dir) with the broker's client listener OAUTHBEARER-only; always down."""
    with _state_dir("e2e-entra-stack-") as state_dir:
        server = state_dir / "kafka-oauthbearer.properties"
        server.write_text(
            "sasl.enabled.mechanisms=OAUTHBEARER\n"
            f"listener.name.client.oauthbearer.sasl.jaas.config={_LOGIN_MODULE} required ;\n"
            f"listener.name.client.oauthbearer.sasl.server.callback.handler.class={_VALIDATOR}\n"
            f"sasl.oauthbearer.jwks.endpoint.url={entra.jwks_url}\n"
            f"sasl.oauthbearer.expected.audience={AUDIENCE}\n"
            f"sasl.oauthbearer.expected.issuer={entra.issuer}\n"
            "sasl.oauthbearer.clock.skew.seconds=1\n"
            # A session lasts as long as its token: a client must re-authenticate with a fresh one (KIP-368).
            "connections.max.reauth.ms=3600000\n"
        )
        client = state_dir / "kafka-client.properties"
        client.write_text(
            "security.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=OAUTHBEARER\n"
            f"sasl.login.callback.handler.class={_LOGIN_HANDLER}\n"
            f"sasl.jaas.config={_LOGIN_MODULE} required ;\n"
            f"sasl.oauthbearer.token.endpoint.url={entra.token_endpoint_http}\n"
            f"sasl.oauthbearer.client.credentials.client.id={CONNECT_CLIENT}\n"
            f"sasl.oauthbearer.client.credentials.client.secret={connect_secret}\n"
            f"sasl.oauthbearer.scope={SCOPE}\n"
        )
        client.chmod(0o600)
        allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={entra.token_endpoint_http},{entra.jwks_url}"
        env = {
            "KAFKA_CLIENT_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_SERVER_PROPERTIES": str(server),
            "KAFKA_CLIENT_PROPERTIES": str(client),
            "LOCAL_JAVA_OPTS": f"{os.environ.get('LOCAL_JAVA_OPTS', '')} {allowed}".strip(),
            "CONNECT_OFFSET_FLUSH_MS": "1000",
        }
        with _stack_up(state_dir, env=env, init_sql=INIT_SQL) as values:
            yield values


def run_environment(entra: EntraDouble, client_id: str, tmp_path: Path) -> dict[str, str]:
    """This process's environment without any password or secret, plus what the workload-identity webhook sets."""
    clean = {
        name: value
        for name, value in os.environ.items()
        if not any(word in name.upper() for word in ("PASSWORD", "SECRET", "IDENTITY_", "AZURE_"))
    }
    return {**clean, **entra.workload_identity_environment(client_id, tmp_path / f"{client_id}.token")}


def write_config(tmp_path: Path, stack: dict[str, str], client_id: str, metrics_port: int) -> Path:
    config = tmp_path / f"{client_id}.yaml"
    config.write_text(
        f"source:\n  bootstrap_servers: {stack['bootstrap.servers']}\n  topics: '{stack['topics']}'\n"
        "  connect_timeout_s: 20\n  max_offsets_per_trigger: 500\n"
        "  kafka_options:\n    security.protocol: SASL_PLAINTEXT\n"
        f"  kafka_auth:\n    kind: entra\n    scope: {SCOPE}\n"
        f"    credential:\n      kind: workload_identity\n      client_id: {client_id}\n"
        f"landing_zone:\n  url: {tmp_path / 'lz'}\ncheckpoint: {tmp_path / 'cp'}\ntrigger: {TRIGGER_S}s\n"
        f"metrics:\n  port: {metrics_port}\nmirror:\n  max_rows_per_file: 400\n"
    )
    return config


class Trickle:
    """A steady stream of inserts, updates and deletes on the table, in a thread, until stopped."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trickle", daemon=True)
        self.changes = 0
        self.failure: BaseException | None = None

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        rng = random.Random(54)
        next_id = SNAPSHOT_ROWS + 1
        try:
            with psycopg.connect(self._url, autocommit=True) as conn:
                while not self._stop.wait(0.25):
                    kind = rng.random()
                    if kind < 0.4:
                        conn.execute(
                            f"INSERT INTO public.{TABLE} (id, name, qty, price) VALUES (%s, %s, %s, %s)",
                            (next_id, f"new {next_id}", rng.randrange(100), rng.randrange(1, 10**6) / 100),
                        )
                        next_id += 1
                    elif kind < 0.85:
                        conn.execute(
                            f"UPDATE public.{TABLE} SET qty = qty + 1, price = %s, updated_at = now() WHERE id = %s",
                            (rng.randrange(1, 10**6) / 100, rng.randrange(1, next_id)),
                        )
                    else:
                        conn.execute(f"DELETE FROM public.{TABLE} WHERE id = %s", (rng.randrange(1, next_id),))
                    self.changes += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test, not lost in a thread
            self.failure = exc


def batch_lines(log: Path) -> int:
    return log.read_text(errors="replace").count('"event":"batch"') if log.exists() else 0


def mirror_exact(url: str, landing: Path) -> bool:
    try:
        reports = verify(url, str(landing))
    except Exception:  # noqa: BLE001 - a file being renamed while read; the next look sees it
        return False
    return bool(reports) and all(report.ok for report in reports)


def landing_files(landing: Path) -> dict[str, str]:
    return {
        str(path.relative_to(landing)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(landing.rglob("*"))
        if path.is_file()
    }


def readyz(port: int) -> int | None:
    """/readyz's status, or ``None`` while nothing answers on the port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def test_run_mirrors_through_entra_tokens_and_a_refused_identity_is_one_error_line(
    entra: EntraDouble, connect_secret: str, entra_stack: dict[str, str], tmp_path: Path
) -> None:
    stack, bootstrap = entra_stack, entra_stack["bootstrap.servers"]
    pg_password = str(conninfo_to_dict(stack["postgres"])["password"])
    # Debezium's snapshot went through the OAUTHBEARER listener: Connect logged in with its client secret.
    assert entra.issued[CONNECT_CLIENT] >= 1

    env = run_environment(entra, MIRROR_CLIENT, tmp_path)
    config = write_config(tmp_path, stack, MIRROR_CLIENT, free_port())
    for secret in (pg_password, connect_secret):
        assert secret not in config.read_text() and not any(secret in value for value in env.values())
    assert not any("PASSWORD" in name.upper() or "SECRET" in name.upper() for name in env)
    assert "password" not in config.read_text()

    log = tmp_path / "run.log"
    connect_tokens = entra.issued[CONNECT_CLIENT]
    with log.open("wb") as sink:
        run = subprocess.Popen(
            [sys.executable, "-m", "connector", "run", "--config", str(config)], cwd=REPO_ROOT, env=env, stderr=sink
        )
    first_token_at: float | None = None
    longest_gap = 0.0
    try:
        with Trickle(stack["postgres"]) as trickle:
            # Changes flow from the start; the run must see more than two of its tokens expire while they do.
            deadline = time.monotonic() + 420
            batches, last_batch_at = 0, None
            while first_token_at is None or time.monotonic() - first_token_at < 2 * TOKEN_LIFE_S + 10:
                assert run.poll() is None, log.read_text(errors="replace")[-4000:]
                assert trickle.failure is None, trickle.failure
                assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
                if first_token_at is None and entra.issued[MIRROR_CLIENT]:
                    first_token_at = time.monotonic()
                now, seen = time.monotonic(), batch_lines(log)
                if seen > batches:
                    if last_batch_at is not None:
                        longest_gap = max(longest_gap, now - last_batch_at)
                    batches, last_batch_at = seen, now
                elif last_batch_at is not None:
                    longest_gap = max(longest_gap, now - last_batch_at)
                time.sleep(0.25)
            trickle.stop()
            assert trickle.failure is None, trickle.failure
            changes = trickle.changes
        # The source is still now: once the mirror equals it, the run has published every change.
        deadline = time.monotonic() + 180
        while not mirror_exact(stack["postgres"], tmp_path / "lz"):
            assert run.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(1)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    output = log.read_text(errors="replace")
    error_lines = [line for line in output.splitlines() if " ERROR " in line or "error:" in line]
    assert error_lines == [], "\n".join(error_lines[:20])
    assert changes > 2 * TOKEN_LIFE_S  # a steady trickle (about 4 changes a second) over the whole window
    assert longest_gap <= STALL_BOUND_S, f"{longest_gap:.1f}s between two batches while changes flowed"
    # Every client of the run and of Connect re-authenticated past two expiries (the broker ends a session whose
    # token expired), so each identity had fresh tokens: at least one per token life after its first.
    assert entra.issued[MIRROR_CLIENT] >= 3, entra.issued
    assert entra.issued[CONNECT_CLIENT] - connect_tokens >= 2, entra.issued
    print(  # shown with -s: what the run measured
        f"changes={changes} longest_gap_s={longest_gap:.1f} tokens={dict(entra.issued)}"
    )
    result = run_connector("verify", "--source", stack["postgres"], "--landing-zone", str(tmp_path / "lz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "differing=0" in result.stdout
    published = landing_files(tmp_path / "lz")

    # An identity Entra refuses (no federated credential), on the same landing zone and checkpoint.
    entra.refuse(REFUSED_CLIENT)
    port = free_port()
    refused_config = write_config(tmp_path, stack, REFUSED_CLIENT, port)
    refused_env = run_environment(entra, REFUSED_CLIENT, tmp_path)
    seen_ready: list[int | None] = []
    refused_log = tmp_path / "refused.log"
    with refused_log.open("wb") as sink:
        refused = subprocess.Popen(
            [sys.executable, "-m", "connector", "run", "--config", str(refused_config)],
            cwd=REPO_ROOT,
            env=refused_env,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + 300
        while refused.poll() is None and time.monotonic() < deadline:
            seen_ready.append(readyz(port))
            time.sleep(0.1)
    finally:
        if refused.poll() is None:
            refused.kill()
        refused.wait()
    stderr = refused_log.read_text(errors="replace")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode not in (0, None), stderr[-3000:]
    assert len(errors) == 1, stderr[-3000:]
    assert REFUSED_CLIENT in errors[0] and bootstrap in errors[0], errors[0]
    assert 200 not in seen_ready, seen_ready
    assert landing_files(tmp_path / "lz") == published
    assert mirror_exact(stack["postgres"], tmp_path / "lz")
