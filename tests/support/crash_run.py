"""Runs ``python -m connector`` and SIGKILLs the process at one chosen instant of publishing.

``CRASH_OPERATION`` names the storage call (``rename_new`` = between numbered files;
``commit`` = after the last file of a batch, before the ledger commit) and ``CRASH_AT`` which
call (1-based) dies. The kill is a real SIGKILL of the real process: no cleanup code runs.
"""

from __future__ import annotations

import os
import signal
import sys

from connector.commands.cli import main
from connector.storage.local import LocalStorage

_OPERATION = os.environ["CRASH_OPERATION"]
_AT = int(os.environ["CRASH_AT"])
_calls = {"n": 0}
_rename = LocalStorage.rename_new
_replace = LocalStorage.replace


def _tick(operation: str) -> None:
    if operation == _OPERATION:
        _calls["n"] += 1
        if _calls["n"] == _AT:
            os.kill(os.getpid(), signal.SIGKILL)


def _crashing_rename(self: LocalStorage, source: str, destination: str, *, size: int | None = None) -> None:
    _tick("rename_new")
    _rename(self, source, destination, size=size)


def _crashing_replace(self: LocalStorage, path: str, data: bytes) -> None:
    if path.endswith("ledger/state.json"):
        _tick("commit")
    _replace(self, path, data)


LocalStorage.rename_new = _crashing_rename  # type: ignore[method-assign]
LocalStorage.replace = _crashing_replace  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
