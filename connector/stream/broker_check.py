"""The driver's periodic Kafka check behind /readyz.

While the brokers are down Spark's Kafka source waits without failing and reports no progress, so neither
the query's state nor the last batch tells an outage from a quiet source. A small metadata request with the
source's own security settings does.
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from connector.config import SourceSettings
from connector.kafka_client import client_config
from connector.kafka_token import token_failure
from connector.operate.health import HealthState

log = logging.getLogger(__name__)


class BrokerCheck:
    """Every ``interval_s``, ask the brokers for cluster metadata; report the outcome to ``health``."""

    def __init__(self, source: SourceSettings, health: HealthState, interval_s: float) -> None:
        self._bootstrap = source.bootstrap_servers
        self._options = client_config(source)
        self._admin = AdminClient(self._options)
        self._health = health
        self._interval_s = interval_s
        self._timeout_s = max(1.0, min(10.0, interval_s))
        self._stopped = threading.Event()
        self._failing = False

    def start(self) -> BrokerCheck:
        """Run the check in a daemon thread."""
        # The thread is made here, not in __init__: a thread that targets an unstarted check's method would put the
        # check (and its admin client) in a reference cycle, which only the cycle collector frees, and it may run
        # inside a librdkafka thread (the token callback), where freeing that thread's own client aborts the process.
        threading.Thread(target=self._loop, name="kafka-broker-check", daemon=True).start()
        return self

    def stop(self) -> None:
        """End the check (at shutdown)."""
        self._stopped.set()

    def check_once(self) -> str | None:
        """One metadata request: ``None`` when a broker answered, else what went wrong.

        An Entra identity that got no token is named with Entra's reason: librdkafka only says its token is not set.
        """
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            refused = token_failure(self._options)
            if refused is not None:
                return refused
            error = exc.args[0] if exc.args else None
            return str(error.str()) if isinstance(error, KafkaError) else str(exc)
        if not metadata.brokers:
            return "no broker in the cluster metadata"
        return None

    def _loop(self) -> None:
        while True:
            problem = self.check_once()
            self._health.broker(problem)
            if problem and not self._failing:
                log.error("kafka brokers %s unreachable: %s", self._bootstrap, problem)
            elif self._failing and not problem:
                log.info("kafka brokers %s reachable again", self._bootstrap)
            self._failing = problem is not None
            if self._stopped.wait(self._interval_s):
                return
