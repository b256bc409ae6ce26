"""A small HTTP client of `hearth serve` for the CLI (and anything else in-process)."""

from .http import HearthClient, ServiceError, ServiceUnreachable
from .service import Connection, connect, start_private_service

__all__ = [
    "HearthClient",
    "ServiceError",
    "ServiceUnreachable",
    "Connection",
    "connect",
    "start_private_service",
]
