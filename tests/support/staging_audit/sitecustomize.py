"""Records which process made each ``_staged_`` file: one line ``pid<TAB>cwd<TAB>path`` per file created.

Put this folder on ``PYTHONPATH`` (the driver's environment, and ``spark.executorEnv.PYTHONPATH`` for the
executors' Python workers) with ``STAGING_AUDIT_LOG`` naming the record file; without that variable it does
nothing. It only observes: an audit hook (PEP 578) sees the ``open`` with ``O_CREAT`` by which ``LocalStorage``
writes a staged file (or an ``os.link`` / ``os.rename`` putting one in place), and appends one line with
``O_APPEND`` (atomic for such short lines, so the driver and every worker can share the file).
"""

from __future__ import annotations

import os
import sys
from typing import Any

_LOG = os.environ.get("STAGING_AUDIT_LOG")
_writing = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _writing[0]:
        return
    if event == "open" and isinstance(args[0], (str, bytes)) and isinstance(args[2], int):
        if not args[2] & os.O_CREAT:
            return
        destination = os.fsdecode(args[0])
    elif event in {"os.link", "os.rename"}:
        destination = os.fsdecode(args[1])
    else:
        return
    if not os.path.basename(destination).startswith("_staged_"):
        return
    _writing[0] = True
    try:
        fd = os.open(str(_LOG), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\t{os.getcwd()}\t{destination}\n".encode())
        finally:
            os.close(fd)
    finally:
        _writing[0] = False


if _LOG:
    sys.addaudithook(_audit)
