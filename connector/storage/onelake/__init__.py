"""OneLake / ADLS Gen2 backend: a landing zone (or checkpoint) reached over the DFS API, one concern a module.

``storage`` (the ``Storage`` operations), ``transfer`` (the upload and the never-overwrite rename with its
fingerprint check), ``azure_errors`` (SDK errors as storage errors, with hints), ``lease`` (the writer lease),
``location`` (the URL parsed) and ``paths`` (the root's relative paths), ``client`` (the SDK client's pool).
"""

from connector.storage.onelake.lease import LEASE_DURATION_S, OneLakeLease
from connector.storage.onelake.location import OneLakeLocation, parse_location
from connector.storage.onelake.storage import OneLakeStorage, open_onelake

__all__ = ["LEASE_DURATION_S", "OneLakeLease", "OneLakeLocation", "OneLakeStorage", "open_onelake", "parse_location"]
