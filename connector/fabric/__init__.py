"""Microsoft Fabric's REST API: the client, the mirrored database's and its tables' status, and ``init``."""
