"""The Kafka dead-letter output: poison records produced, raw, to a dead-letter topic.

Separate from ``writer`` (the writer interface; the record and the policy are ``connector.collect.poison``) and
from ``folder``, so that the producer, its options and its delivery-error rules live on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from connector.collect.poison import DeadLetter
from connector.config import DeadLetterSettings, SourceSettings
from connector.deadletter.writer import DeadLetterError, DeadLetterUnavailable, DeadLetterWriter
from connector.errors import ConfigError
from connector.kafka_client import client_config
from connector.secrets import redact, resolve_secret_references

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Producer

_LOG = logging.getLogger(__name__)

HEADER_PREFIX = "deadletter."


def producer_config(source: SourceSettings, config: DeadLetterSettings, bootstrap: str) -> dict[str, Any]:
    """Producer options (librdkafka names) for the dead-letter topic.

    Security options come from ``source.kafka_options`` and ``source.kafka_auth`` (the source's brokers usually
    host the dead-letter topic), as for every client (``connector.kafka_client.client_config``);
    ``dead_letter.producer_options`` win over them and may give the librdkafka form of a Java-only option.
    Idempotence, ``acks=all`` and the delivery timeout are always set.
    """
    extra: dict[str, Any] = {
        key: resolve_secret_references(raw_value, f"dead_letter.producer_options.{key}")
        for key, raw_value in config.producer_options.items()
    }
    extra.update(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": int(config.delivery_timeout_s * 1000),
        }
    )
    return client_config(source, **extra)


class KafkaDeadLetterWriter(DeadLetterWriter):
    """Produces each poison record to a dead-letter topic, raw, keyed as it was.

    The record keeps its key (so one key's letters stay in order in one partition), value and headers,
    plus ``deadletter.error``, ``deadletter.topic``, ``deadletter.partition``, ``deadletter.offset``,
    ``deadletter.table``, ``deadletter.batch_id`` and, when known, ``deadletter.timestamp`` headers.
    The producer is idempotent with ``acks=all`` and ``write`` flushes before returning, so a batch is
    only published after its letters are durable. Delivery is at-least-once across replays: a batch that
    failed after its letters were produced produces them again when Spark replays it.
    """

    def __init__(self, topic: str, config: dict[str, Any], delivery_timeout_s: float) -> None:
        self.topic = topic
        self._config = config
        self._timeout = delivery_timeout_s
        self._producer: Any = None
        self.location = f"kafka topic {topic} on {config.get('bootstrap.servers')}"

    def __getstate__(self) -> dict[str, Any]:
        return {"topic": self.topic, "config": self._config, "timeout": self._timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["topic"], state["config"], state["timeout"])  # type: ignore[misc]

    def redacted_config(self) -> dict[str, str]:
        """The producer options, safe to log."""
        return {k: redact(k, str(v)) for k, v in self._config.items()}

    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Produce ``letters`` and wait until every one is acknowledged by all in-sync replicas."""
        if not letters:
            return
        producer = self._open_producer()
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _message: object) -> None:
            if err is not None:
                failures.append(err)

        for letter in letters:
            self._produce(producer, letter, [*letter.headers, *_headers(batch_id, letter)], on_delivery)
            producer.poll(0)
        undelivered = producer.flush(self._timeout)
        if failures:
            first = failures[0]
            msg = (
                f"dead-letter topic {self.topic}: {len(failures)} of {len(letters)} record(s) of batch {batch_id} "
                f"not delivered: {first.str()}"
            )
            if any(_permanent(f) for f in failures):
                raise DeadLetterError(msg)
            raise DeadLetterUnavailable(msg)
        if undelivered:
            msg = (
                f"dead-letter topic {self.topic}: {undelivered} record(s) of batch {batch_id} not acknowledged "
                f"within dead_letter.delivery_timeout_s={self._timeout}"
            )
            raise DeadLetterUnavailable(msg)
        tables = sorted({letter.table for letter in letters})
        _LOG.warning(
            "dead-lettered %d record(s) of table(s) %s (batch %d) to %s; first %s: %s",
            len(letters),
            ", ".join(tables),
            batch_id,
            self.location,
            letters[0].position,
            letters[0].error,
        )

    def _open_producer(self) -> Producer:
        from confluent_kafka import KafkaException, Producer

        if self._producer is None:
            try:
                self._producer = Producer(self._config)
            except KafkaException as exc:
                msg = f"dead-letter producer for {self.location}: {exc.args[0]}"
                raise ConfigError(msg) from None
        return self._producer

    def _produce(
        self,
        producer: Producer,
        letter: DeadLetter,
        headers: list[tuple[str, bytes | None]],
        on_delivery: Callable[[KafkaError | None, object], None],
    ) -> None:
        """Hand one record to the producer's queue, waiting while the queue is full."""
        from confluent_kafka import KafkaException

        while True:
            try:
                producer.produce(
                    self.topic, key=letter.key, value=letter.value, headers=headers, on_delivery=on_delivery
                )
                return
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
            except KafkaException as exc:
                msg = f"dead-letter topic {self.topic} refused {letter.position}: {exc.args[0]}"
                raise DeadLetterError(msg) from None

    def close(self) -> None:
        """Flush what is queued and drop the producer."""
        if self._producer is not None:
            self._producer.flush(self._timeout)
            self._producer = None


# Delivery errors a replay cannot fix: a person has to change ACLs, the topic or its size limit. Anything
# else (timeouts, brokers down, leader elections) is transient: the batch fails and is replayed.
_PERMANENT_ERRORS = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "_AUTHENTICATION",
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_RECORD",
        "_UNKNOWN_TOPIC",
        "UNKNOWN_TOPIC_OR_PART",
        "TOPIC_EXCEPTION",
        "_INVALID_ARG",
    }
)


def _permanent(error: Any) -> bool:
    return bool(error.fatal()) or str(error.name()) in _PERMANENT_ERRORS


def _headers(batch_id: int, letter: DeadLetter) -> list[tuple[str, bytes]]:
    out = [
        (f"{HEADER_PREFIX}error", letter.error.encode()),
        (f"{HEADER_PREFIX}topic", letter.topic.encode()),
        (f"{HEADER_PREFIX}partition", str(letter.partition).encode()),
        (f"{HEADER_PREFIX}offset", str(letter.offset).encode()),
        (f"{HEADER_PREFIX}table", letter.table.encode()),
        (f"{HEADER_PREFIX}batch_id", str(batch_id).encode()),
    ]
    if letter.timestamp_ms is not None:
        out.append((f"{HEADER_PREFIX}timestamp", str(letter.timestamp_ms).encode()))
    return out
