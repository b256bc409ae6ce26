"""The CLI's service: the one at HEARTH_HOST (default 127.0.0.1:11434), or a private one.

`hearth run` works with no service running: it starts a private `hearth serve` (through
`hearth.launcher`: a free loopback port, a random API key), talks to it, and ends it on exit;
the private service also exits by itself when our end of its stdin closes, so a killed CLI
leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import env
from ..client import HearthClient, ServiceError, ServiceUnreachable
from ..launcher import LaunchError, PrivateService, hearth_answers, start_private_service
from ..launcher import service_url as shared_url

__all__ = ["Connection", "connect", "service_url"]


def service_url() -> str:
    """Where a shared service listens, from HEARTH_HOST."""
    try:
        return shared_url()
    except ValueError as e:
        raise ServiceError(str(e)) from None


@dataclass
class Connection:
    client: HearthClient
    service: PrivateService | None = None  # a private service we started

    def close(self) -> None:
        self.client.close()
        if self.service is not None:
            self.service.stop()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(start_private: bool = False) -> Connection:
    """A client of the running service; else a private one when `start_private`."""
    url = service_url()
    key = env.text("HEARTH_API_KEY") or None
    if hearth_answers(url, key):
        return Connection(HearthClient(url, key))
    if not start_private:
        raise ServiceUnreachable(
            f"no Hearth service is running at {url}; start one with `hearth serve`"
        )
    try:
        service = start_private_service(log_level="warning")
    except LaunchError as e:
        raise ServiceError(f"could not start a private Hearth service: {e}") from None
    return Connection(HearthClient(service.url, service.token), service)
