"""Which source a landing zone mirrors: Debezium's topic prefix, recorded once, and checked at every start and batch.

Table folders drop Debezium's topic prefix (``chaos.public.customers`` lands in ``public.schema/customers``), so two
Debezium connectors with the same schema and table names would silently merge into one set of folders. A landing
zone therefore belongs to one source: the first start (or batch) that knows its topics records the prefix (and the
source databases seen in events' ``source.db``) in ``_connectorSource.json`` at the landing-zone root (the ``_``
keeps open mirroring off it) and in the ledger. Topics of another prefix, or two topics that would land in the same
table folder, are refused with one line naming both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import orjson

from connector.config import MirrorSettings
from connector.errors import ConfigError, LandingZoneCorrupt
from connector.landing_zone.layout import discover_tables, table_for_topic
from connector.publish.ledger import BatchLedger
from connector.publish.ledger_state import LedgerState
from connector.storage.base import Storage

#: The record at the landing-zone root.
SOURCE_FILE = "_connectorSource.json"

RECOVERY = (
    "A landing zone (one Fabric mirrored database) mirrors one source database: give each Debezium source its "
    "own landing zone (--landing-zone) and its own checkpoint (--checkpoint), or narrow source.topics to one "
    "source's topics"
)


class SourceConflict(ConfigError):
    """Topics of another source than the landing zone's, or two topics that would land in one table folder."""


@dataclass(frozen=True)
class SourceIdentity:
    """A Debezium source: its ``topic.prefix`` (the logical server name) and the source databases seen."""

    topic_prefix: str
    databases: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        """JSON form (the file's and the ledger's)."""
        return orjson.dumps({"topicPrefix": self.topic_prefix, "databases": list(self.databases)})

    @classmethod
    def from_json(cls, raw: bytes | str) -> SourceIdentity:
        """Parse the JSON form.

        Raises:
            ValueError: not the JSON form.
        """
        data = orjson.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("topicPrefix"), str):
            msg = "expected an object with a string topicPrefix"
            raise ValueError(msg)
        return cls(str(data["topicPrefix"]), tuple(sorted(str(d) for d in data.get("databases") or ())))


def topic_prefix(topic: str) -> str | None:
    """Debezium's topic prefix of a table topic ``<prefix>.<schema>.<table>``; ``None`` for any other topic.

    Heartbeats (``__debezium-heartbeat.<prefix>``), the transaction topic (``<prefix>.transaction``) and the
    schema-change topic (``<prefix>``) hold no table rows. A prefix may itself contain dots.
    """
    if topic.startswith("__"):
        return None
    parts = topic.split(".")
    if len(parts) < 3:
        return None
    return ".".join(parts[:-2])


def check_topics(topics: Iterable[str], mirror: MirrorSettings, where: str) -> str | None:
    """The one Debezium prefix ``topics`` belong to (``None`` when none is a table topic).

    Raises:
        SourceConflict: two topics would land in the same table folder, or the topics belong to several prefixes.
    """
    folders: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for topic in sorted(set(topics)):
        prefix = topic_prefix(topic)
        if prefix is None:
            continue
        prefixes.setdefault(prefix, topic)
        folder = table_for_topic(topic, mirror).folder
        other = folders.setdefault(folder, topic)
        if other != topic:
            msg = (
                f"the topics {other} and {topic} would both land in the table folder {folder} of the landing zone "
                f"{where}, merging two tables into one; refused before anything is published. {RECOVERY}"
            )
            raise SourceConflict(msg)
    if len(prefixes) > 1:
        shown = ", ".join(f"{p!r} ({t})" for p, t in sorted(prefixes.items()))
        msg = (
            f"the topics belong to {len(prefixes)} Debezium sources (topic prefixes {shown}), but the landing zone "
            f"{where} mirrors one source; refused before anything is published. {RECOVERY}"
        )
        raise SourceConflict(msg)
    return next(iter(prefixes), None)


def read_landing_identity(landing: Storage) -> SourceIdentity | None:
    """The source recorded at the landing-zone root, ``None`` when none is.

    Raises:
        LandingZoneCorrupt: the file is not one the connector wrote.
    """
    try:
        raw = landing.read_bytes(SOURCE_FILE)
    except FileNotFoundError:
        return None
    try:
        return SourceIdentity.from_json(raw)
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        msg = (
            f"{landing.url}/{SOURCE_FILE} (the source this landing zone mirrors) is unreadable ({exc}); write it "
            'again as {"topicPrefix": "<Debezium topic.prefix>"} or delete it (the next start records it again)'
        )
        raise LandingZoneCorrupt(msg) from None


def ledger_identity(state: LedgerState, where: str) -> SourceIdentity | None:
    """The source the ledger recorded, or the one its tables' topics show (a ledger written before it was recorded).

    Raises:
        LandingZoneCorrupt: the recorded source is unreadable.
        SourceConflict: the ledger's tables come from topics of several prefixes (merged before this check).
    """
    if state.source_identity is not None:
        try:
            return SourceIdentity.from_json(state.source_identity)
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            msg = f"the ledger in {where} records an unreadable source_identity ({exc})"
            raise LandingZoneCorrupt(msg) from None
    prefixes = sorted({p for t in state.tables.values() if t.topic and (p := topic_prefix(t.topic)) is not None})
    if len(prefixes) > 1:
        msg = (
            f"the ledger in {where} already holds tables of {len(prefixes)} Debezium sources (topic prefixes "
            f"{', '.join(map(repr, prefixes))}): their rows were merged before sources were recorded. Start over "
            "with an emptied landing zone and a new checkpoint per source"
        )
        raise SourceConflict(msg)
    return SourceIdentity(prefixes[0]) if prefixes else None


def check_topic_prefix(
    prefix: str | None, landing: Storage, state: LedgerState, *, where_ledger: str, topics: str = ""
) -> SourceIdentity | None:
    """Refuse a run whose topics' ``prefix`` is not the landing zone's (or the checkpoint's); read-only.

    Returns:
        The identity recorded so far (the landing zone's, else the ledger's), ``None`` when none is.

    Raises:
        SourceConflict: another prefix is recorded, or the landing zone and the checkpoint belong to two sources.
    """
    recorded = read_landing_identity(landing)
    in_ledger = ledger_identity(state, where_ledger)
    if recorded is not None and in_ledger is not None and recorded.topic_prefix != in_ledger.topic_prefix:
        msg = (
            f"the landing zone {landing.url} belongs to the Debezium source with topic prefix "
            f"{recorded.topic_prefix!r} ({SOURCE_FILE}), but the checkpoint {where_ledger} to "
            f"{in_ledger.topic_prefix!r}: they are parts of two different mirrors. Use the checkpoint that belongs "
            f"with this landing zone. {RECOVERY}"
        )
        raise SourceConflict(msg)
    known = recorded or in_ledger
    if known is None or prefix is None or prefix == known.topic_prefix:
        return known
    if recorded is not None and in_ledger is None and not discover_tables(landing):
        return None  # recorded, but nothing published yet: the first publish claims it anew
    whose = f"source.topics {topics!r}" if topics else "this run's topics"
    msg = (
        f"the landing zone {landing.url} belongs to the Debezium source with topic prefix {known.topic_prefix!r}, "
        f"but {whose} belong to the source with topic prefix {prefix!r}; refused, nothing changed. {RECOVERY} "
        f"(if {known.topic_prefix!r} is retired for good: start over with an emptied landing zone and a new "
        "checkpoint)"
    )
    raise SourceConflict(msg)


class SourceClaim:
    """Checks each batch's topics against the landing zone's source, and records it with the first batch's commit.

    The sink calls :meth:`admit` with a batch's topics (and the ``source.db`` values seen, when known) before it
    plans the batch, holding its lock; a refusal fails the batch before anything of it is published. What is new
    to record goes into the batch's own ledger commit (:meth:`recorded_in`), so recording adds no commit of its own.
    """

    def __init__(self, landing: Storage, ledger: BatchLedger, mirror: MirrorSettings) -> None:
        self.landing = landing
        self.ledger = ledger
        self.mirror = mirror
        self._topics: set[str] = set()
        self._identity: SourceIdentity | None = None
        self.pending: SourceIdentity | None = None  # to record with the next commit

    def admit(self, topics: Iterable[str], databases: Iterable[str] = ()) -> None:
        """Check ``topics`` with every topic seen before; remember the source to record when it is new.

        Raises:
            SourceConflict: a topic of another prefix, or one that lands in the folder of another topic.
        """
        batch = {t for t in topics if topic_prefix(t) is not None}
        new_databases = set(databases) - set(self._identity.databases if self._identity else ())
        if batch <= self._topics and not new_databases and self._identity is not None:
            return
        known = {t.topic for t in self.ledger.state.tables.values() if t.topic}
        prefix = check_topics(self._topics | known | batch, self.mirror, self.landing.url)
        recorded = check_topic_prefix(prefix, self.landing, self.ledger.state, where_ledger=self.ledger.storage.url)
        self._topics |= batch
        if prefix is None:
            return
        wanted = SourceIdentity(
            prefix,
            tuple(
                sorted(set(recorded.databases if recorded and recorded.topic_prefix == prefix else ()) | set(databases))
            ),
        )
        if wanted != recorded or self.ledger.state.source_identity is None:
            self.pending = wanted
        self._identity = wanted

    def recorded_in(self, state: LedgerState) -> LedgerState:
        """``state`` with the pending source recorded; its file at the landing-zone root is written now."""
        if self.pending is None:
            return state
        if read_landing_identity(self.landing) != self.pending:
            self.landing.replace(SOURCE_FILE, self.pending.to_json())
        encoded = self.pending.to_json().decode()
        self.pending = None
        return state if state.source_identity == encoded else replace(state, source_identity=encoded)
