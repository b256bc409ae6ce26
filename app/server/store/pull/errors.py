"""What can go wrong in a pull, as sentences with the HTTP status the service answers with."""

from __future__ import annotations

__all__ = ["PullError", "PullCancelled", "DiskFull", "Offline"]


class PullError(ValueError):
    """A pull failed for a reason the user can act on; `status` is the HTTP status the
    service answers with when the response has not started yet."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class Offline(PullError):
    """HEARTH_OFFLINE forbids network access."""

    status = 403


class DiskFull(PullError):
    """The disk holding the model store ran out of space (ENOSPC); the partial file is gone."""

    status = 507


class PullCancelled(Exception):
    """The client went away or the user cancelled; what was downloaded stays as a partial
    file (the next pull resumes it) and nothing is registered."""
