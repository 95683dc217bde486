"""Runs ``python -m connector`` and SIGKILLs it right after the ledger first records a data gap.

That commit also begins the gap's table rebuild; Spark's checkpoint has not been moved past the gap yet. The kill
is a real SIGKILL of the real process (no cleanup runs), at the instant issue 32 says a restart must survive.
"""

from __future__ import annotations

import os
import signal
import sys

from connector.commands.cli import main
from connector.storage.local import LocalStorage

_replace = LocalStorage.replace


def _replace_then_die_on_a_gap(self: LocalStorage, path: str, data: bytes) -> None:
    _replace(self, path, data)
    if path.endswith("ledger/state.json") and b'"data_gaps"' in data:
        os.kill(os.getpid(), signal.SIGKILL)


LocalStorage.replace = _replace_then_die_on_a_gap  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
