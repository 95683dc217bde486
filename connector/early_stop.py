"""The stop signals taken from the process's first instant, before any heavy import.

Kubernetes sends SIGTERM whenever it likes (a rollout, a node drain), and ``python -m connector run`` spends
seconds importing PySpark and reading its settings before ``run`` installs its own handlers: on a slow CPU a
signal in that window killed the process (exit -15, an empty log). ``connector/__main__.py`` installs these
handlers first thing. They only remember the request (stdlib only, nothing to import); ``run``'s
``GracefulStop`` takes it over and stops cleanly at its next check. Every other command puts the default
handlers back at once (``release``) and, if a signal came meanwhile, receives it again as it would have.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_requested = threading.Event()
_signal_name: list[str] = []
_installed: dict[signal.Signals, object] = {}


def _remember(signum: int, frame: FrameType | None) -> None:
    # Only an Event here: the interpreter may be in the middle of an import.
    if not _requested.is_set():
        _signal_name.append(signal.Signals(signum).name)
        _requested.set()


def install() -> None:
    """Remember SIGTERM and SIGINT instead of dying of them (the main thread only, as Python requires)."""
    for sig in STOP_SIGNALS:
        _installed[sig] = signal.signal(sig, _remember)


def requested() -> str | None:
    """The name of the first stop signal received since :func:`install` (``None`` when none came)."""
    return _signal_name[0] if _requested.is_set() else None


def release() -> None:
    """Put back the handlers found at :func:`install` and deliver a signal that came meanwhile, as it would have."""
    for sig, previous in _installed.items():
        signal.signal(sig, previous)  # type: ignore[arg-type]
    _installed.clear()
    name = requested()
    if name is not None:
        _requested.clear()
        _signal_name.clear()
        signal.raise_signal(signal.Signals[name])
