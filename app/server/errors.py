"""The service's own errors: what the layers below the routes (scheduling, prompting, the
store) raise when a request cannot be served. They say what went wrong in the domain's words;
`api/shared/errors.py` alone decides the HTTP status each one answers with.
"""

from __future__ import annotations

__all__ = ["InputTooLarge", "ModelFailed", "ModelFileMissing", "RequestError"]


class RequestError(ValueError):
    """The request cannot be served as asked: a model without the feature it needs, an
    option or an input this model or machine cannot take. The caller can fix it (400)."""


class InputTooLarge(RequestError):
    """An input past one of the service's limits (an image's bytes or pixels) (413)."""


class ModelFileMissing(LookupError):
    """A model's manifest names a file the store no longer has (a linked file moved) (404)."""


class ModelFailed(RuntimeError):
    """The model's runner failed while serving the request (it died or broke) (500)."""
