"""What an Azure SDK error says, in log-safe form: its service error code, or a short description.

Shared by the OneLake storage (``onelake``) and its writer lease (``onelake_lease``).
"""

from __future__ import annotations

from azure.core.exceptions import AzureError


def describe_failure(err: AzureError) -> str:
    """Status and error code, or the exception type: enough to diagnose, never a request or token."""
    status = getattr(err, "status_code", None)
    return f"HTTP {status} {error_code(err)}".strip() if status else type(err).__name__


def error_code(err: AzureError) -> str:
    """The service's error code (``x-ms-error-code``), as a plain string."""
    code = getattr(err, "error_code", None)
    if code is None:
        response = getattr(err, "response", None)
        code = response.headers.get("x-ms-error-code") if response is not None else None
    return str(getattr(code, "value", code) or "")
