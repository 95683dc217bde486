"""The SDK client of one OneLake / ADLS Gen2 filesystem: our retry policy, timeouts, CA bundle and a larger pool."""

from __future__ import annotations

import requests
from azure.core.credentials import TokenCredential
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.filedatalake import FileSystemClient
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from connector.storage.onelake.location import OneLakeLocation
from connector.storage.retry import BackoffRetryPolicy, RetrySettings

#: Connections kept open to OneLake: the driver renames up to ``mirror.publish_parallelism`` tables at once (16 by
#: default). The SDK's default pool keeps 10, so every request beyond them opened (and dropped) a TLS connection.
POOL_CONNECTIONS = 32


def filesystem_client(
    location: OneLakeLocation, credential: TokenCredential, retry: RetrySettings, ca_bundle: str | None
) -> FileSystemClient:
    """A client of ``location``'s filesystem; nothing is sent until its first request.

    Args:
        location: The endpoint and filesystem (workspace or container).
        credential: The token credential, scoped to storage.
        retry: Backoff and timeout settings (the pipeline retries; urllib3 does not).
        ca_bundle: PEM bundle of the CAs to trust instead of the default store, for TLS-inspecting proxies or
            private endpoints with an internal CA.
    """
    return FileSystemClient(
        location.account_url,
        location.filesystem,
        credential=credential,
        retry_policy=BackoffRetryPolicy(retry),
        transport=RequestsTransport(
            session=_pooled_session(),
            session_owner=True,
            connection_timeout=retry.connection_timeout,
            read_timeout=retry.read_timeout,
            connection_verify=ca_bundle or True,
        ),
    )


def _pooled_session() -> requests.Session:
    """A requests session keeping ``POOL_CONNECTIONS`` connections; retries are the pipeline's, not urllib3's."""
    session = requests.Session()
    no_retries = Retry(total=False, redirect=False, raise_on_status=False)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_CONNECTIONS, max_retries=no_retries)
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return session
