"""The ``verify`` extra: packages only ``verify`` and ``replay --format delta`` need.

The database drivers (psycopg, PyMySQL) and ``deltalake`` are not dependencies of the service: they are
installed with ``pip install "debezium-fabric-mirror[verify]"`` (the quick start and the tests do). A
command that needs one checks first, so its absence is one ``error:`` line saying what to install, not
a traceback halfway through.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from connector.errors import ConnectorError

VERIFY_EXTRA = "debezium-fabric-mirror[verify]"
"""The distribution extra holding ``verify``'s and ``replay --format delta``'s packages."""


class MissingExtra(ConnectorError):
    """A command needs a package of the ``verify`` extra that is not installed."""


def require_extra(command: str, modules: Iterable[str]) -> None:
    """Import ``modules`` (so a broken install fails here too); refuse ``command`` when one is missing.

    Raises:
        MissingExtra: a module cannot be imported; the message names the modules and the extra to install.
    """
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        msg = (
            f"{command} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed: "
            f'pip install "{VERIFY_EXTRA}"'
        )
        raise MissingExtra(msg)
