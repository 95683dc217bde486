"""Real Kafka brokers with listeners deploy/local/kafka.sh does not make: OAUTHBEARER validating JWTs by JWKS, any.

The broker checks every token with Kafka's own validator (``OAuthBearerValidatorCallbackHandler``): signature
against the keys at ``jwks_url`` (the Entra double's ``/keys``), ``aud``, ``iss``, expiry with one second of skew.
``connections.max.reauth.ms`` makes it end a session when its token expires unless the client re-authenticated
(KIP-368): a client that stopped refreshing its token loses the broker within one token life. Kafka 4.x fetches
only URLs named in the ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` JVM property, set here.

The broker's own listeners (inter-broker, controller) stay PLAINTEXT. Same jars and KRaft single node as
``deploy/local/kafka.sh`` (which starts PLAINTEXT brokers only) and ``test_preflight_kafka``'s SASL PLAIN broker.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.kafka import REPO_ROOT

KAFKA_JARS = REPO_ROOT / ".cache" / "jars" / "kafka"
START_TIMEOUT_S = 120
_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class BrokerDidNotStart(RuntimeError):
    """The broker exited or did not log its start in time; the message holds its log's tail."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def oauth_broker_config(state: Path, ports: tuple[int, int, int], jwks_url: str, audience: str, issuer: str) -> str:
    """``server.properties`` of the broker: client ``ports[0]`` (OAUTHBEARER), inter-broker, controller."""
    client, internal, controller = ports
    oauth = "listener.name.sasl_plaintext.oauthbearer"
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=SASL_PLAINTEXT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal},"
            f"CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}",
            "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
            "controller.listener.names=CONTROLLER",
            "sasl.enabled.mechanisms=OAUTHBEARER",
            f"{oauth}.sasl.jaas.config={_LOGIN_MODULE} required ;",
            f"{oauth}.sasl.server.callback.handler.class={_VALIDATOR}",
            f"sasl.oauthbearer.jwks.endpoint.url={jwks_url}",
            f"sasl.oauthbearer.expected.audience={audience}",
            f"sasl.oauthbearer.expected.issuer={issuer}",
            "sasl.oauthbearer.clock.skew.seconds=1",
            # A session lasts as long as its token: a client must re-authenticate with a fresh one (KIP-368).
            "connections.max.reauth.ms=3600000",
            f"log.dirs={state / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "",
        ]
    )


@contextmanager
def oauth_broker(state: Path, *, jwks_url: str, audience: str, issuer: str) -> Iterator[str]:
    """Start the broker under ``state``; yield its bootstrap servers; stop it (by its pid) afterwards.

    Raises:
        BrokerDidNotStart: The jars are missing, or the broker exited or did not start within the time.
    """
    ports = (free_port(), free_port(), free_port())
    config = oauth_broker_config(state, ports, jwks_url, audience, issuer)
    with running_broker(state, config, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url}"):
        yield f"127.0.0.1:{ports[0]}"


@contextmanager
def running_broker(state: Path, config: str, *java_options: str) -> Iterator[None]:
    """A single-node KRaft broker of ``server.properties`` text ``config`` under ``state``, stopped afterwards.

    For the tests' brokers whose listeners ``deploy/local/kafka.sh`` does not make (SASL PLAIN, OAUTHBEARER).

    Raises:
        BrokerDidNotStart: The jars are missing, or the broker exited or did not start within the time.
    """
    if not sorted(KAFKA_JARS.glob("*.jar")):
        msg = f"no Kafka jars in {KAFKA_JARS}: run deploy/local/fetch-jars.sh kafka"
        raise BrokerDidNotStart(msg)
    state.mkdir(parents=True, exist_ok=True)
    properties = state / "server.properties"
    properties.write_text(config)
    log4j = state / "log4j2.properties"
    log4j.write_text(
        "appender.console.type = Console\nappender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %m (%c)%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.console.ref = STDOUT\n"
    )
    java = ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1", *java_options, f"-Dlog4j2.configurationFile={log4j}"]
    java += ["-cp", f"{KAFKA_JARS}/*"]
    log = state / "broker.log"
    with log.open("ab") as sink:
        subprocess.run(
            [
                *java,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                str(uuid.uuid4()),
                "-c",
                str(properties),
            ],
            stdout=sink,
            stderr=sink,
            check=True,
            timeout=START_TIMEOUT_S,
        )
        broker = subprocess.Popen([*java, "kafka.Kafka", str(properties)], stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Kafka Server started" not in log.read_text(errors="replace"):
            if broker.poll() is not None or time.monotonic() > deadline:
                msg = f"broker did not start:\n{log.read_text(errors='replace')[-4000:]}"
                raise BrokerDidNotStart(msg)
            time.sleep(0.5)
        yield
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
