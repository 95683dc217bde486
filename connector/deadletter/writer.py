"""Dead-letter outputs for poison records: a folder outside the landing zone, or a Kafka topic.

Under ``poison_policy: dead-letter`` a record that cannot be decoded is kept here, raw (key, value and
headers exactly as Kafka held them) with where it came from and why it failed, and its table goes on.
The writer is called once per micro-batch, before the batch's landing-zone files are published, so a
record is never lost: either it is in the dead-letter output, or the batch failed and Spark replays it.

Replays are why ``write`` is idempotent per batch id for the folder (a replayed batch finds its file and
adds only what is missing) and at-least-once for Kafka (a replayed batch is produced again; consumers
of the dead-letter topic dedupe by the ``deadletter.topic`` / ``.partition`` / ``.offset`` headers).

This module holds what both outputs share: the writer interface, and the batch's step that hands the batch's
letters to it (``send_dead_letters``); the record and the poison policy are ``connector.collect.poison``; the writers
are ``folder`` and ``kafka``, chosen by ``output``.
"""

from __future__ import annotations

import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

from connector.collect.pieces import Collected
from connector.collect.poison import DeadLetter
from connector.errors import ConnectorError, TransientError
from connector.publish.batch_result import BatchResult

log = logging.getLogger(__name__)

#: Default folder, under the checkpoint volume: outside the landing zone, on storage the job owns.
DEFAULT_FOLDER = "_deadletter"


class DeadLetterError(ConnectorError):
    """Dead letters could not be written for a reason retrying does not fix (a missing topic, ACLs)."""


class DeadLetterUnavailable(TransientError):
    """The dead-letter output did not accept the batch in time; the batch fails and is replayed."""


class DeadLetterWriter(ABC):
    """Where poison records go; one ``write`` per micro-batch."""

    #: Where the letters go, safe to log (no credentials).
    location: str

    @abstractmethod
    def write(self, batch_id: int, letters: Sequence[DeadLetter]) -> None:
        """Store ``letters`` durably before returning.

        Raises:
            DeadLetterUnavailable: the output did not accept them in time (transient).
            DeadLetterError: the output refuses them (terminal).
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most writers hold nothing
        """Release clients; the writer must not be used afterwards."""


def send_dead_letters(
    writer: DeadLetterWriter | None, batch_id: int, slices: Sequence[Collected], result: BatchResult
) -> None:
    """A batch's poison records go out, before any file of the batch is published (a replay writes them again).

    ``writer`` is ``None`` only where no table's policy is ``dead-letter``: the sink refuses that policy without one.
    """
    letters = sorted(itertools.chain.from_iterable(s.poison for s in slices), key=DeadLetter.sort_key)
    if not letters:
        return
    assert writer is not None  # noqa: S101 - the sink requires it for dead-letter tables
    writer.write(batch_id, letters)
    for letter in letters:
        result.dead_letters[letter.table] = result.dead_letters.get(letter.table, 0) + 1
        log.warning(
            "dead letter: table %s %s went to %s: %s", letter.table, letter.position, writer.location, letter.error
        )
