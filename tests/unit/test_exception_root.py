"""One exception root: every exception the package defines derives from ``ConnectorError`` (``connector.errors``).

So ``except ConnectorError`` means "anything the connector itself raised", and a new exception that forgets the
root fails here rather than escaping as a traceback. The few that must stay outside are listed with the reason.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import connector
from connector.errors import ConnectorError

#: Exceptions defined in the package that are not ``ConnectorError``s on purpose, with why. Keep it short.
OUTSIDE_THE_ROOT = {
    # Control flow between the columnar lane and the record path, never a failure: an ``except ConnectorError``
    # on its way to the lane must not swallow it.
    "connector.errors.BulkDeclined",
    # Control flow inside the audit: a table whose rebuild was requested mid-comparison leaves the round unjudged;
    # the round's ``except ConnectorError`` (a failed comparison, recorded as such) must not take it for a failure.
    "connector.audit.finding.TableWithdrawn",
}


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(connector.__path__, "connector."):
        if module_info.name == "connector.__main__":
            continue  # running it is the CLI; it defines nothing
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_of_the_package_derives_from_connector_error() -> None:
    defined = _defined_exceptions()
    assert "connector.errors.ConnectorError" in defined  # the walk sees the package
    outside = sorted(name for name, cls in defined.items() if not issubclass(cls, ConnectorError))
    assert outside == sorted(OUTSIDE_THE_ROOT)


def test_the_exceptions_that_were_value_errors_still_are() -> None:
    """Joining the root kept their old base, so an ``except ValueError`` catches them as before."""
    defined = _defined_exceptions()
    for name in (
        "connector.debezium.arrow_values.ConversionError",
        "connector.landing_zone.metadata.AmbiguousMetadata",
    ):
        assert issubclass(defined[name], ValueError), name
        assert issubclass(defined[name], ConnectorError), name
