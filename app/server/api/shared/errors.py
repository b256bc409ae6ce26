"""Errors as HTTP answers: every expected failure becomes a status code and one sentence.

Native routes answer `{"error": "..."}`; `/v1/` routes answer OpenAI's
`{"error": {"message", "type", "param", "code"}}`; Anthropic's Messages routes
(`/v1/messages...`) answer `{"type": "error", "error": {"type", "message"}}`, with a busy
service's 503 sent as Anthropic's 529 (overloaded). Malformed requests are 4xx; a 5xx means the
service itself or a model failed (never the caller's input), and the catch-all handler makes
sure even a bug answers with a sentence rather than a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ....engine.gguf import GGUFError
from ...errors import InputTooLarge, ModelFailed, ModelFileMissing, RequestError
from ...prompting.templates import TemplateError
from ...scheduling.layout import LayoutRequestError, ModelTooLarge
from ...scheduling.records import LoadFailed, ServerBusy
from ...scheduling.runner_process import RunnerError
from ...store.model_store import BlobError, ModelNotFound
from ...store.names import InvalidName

__all__ = [
    "APIError",
    "install_error_handlers",
    "error_answer",
    "error_body",
    "validation_message",
]

log = logging.getLogger("hearth.server")


class APIError(Exception):
    """Raise from a route to answer `status` with `message`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# Statuses Anthropic's clients read differently: a busy service is "overloaded" (529).
_ANTHROPIC_STATUS = {503: 529}


def is_anthropic(path: str) -> bool:
    """Whether `path` is one of the Anthropic Messages API's routes (its own error shape)."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def error_answer(path: str, status: int, message: str) -> tuple[int, dict[str, Any]]:
    """The status and body that answer a failure (`status`, `message`) on `path`, in the
    shape of the API the path belongs to."""
    if is_anthropic(path):
        status = _ANTHROPIC_STATUS.get(status, status)
        kind = _ANTHROPIC_TYPES.get(
            status, "invalid_request_error" if status < 500 else "api_error"
        )
        return status, {"type": "error", "error": {"type": kind, "message": message}}
    return status, error_body(path, status, message)


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """The body of an error on a native or OpenAI route (see `error_answer` for all routes)."""
    if path.startswith("/v1/"):
        kind = _OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return {"error": message}


def _answer(request: Request, status: int, message: str) -> JSONResponse:
    status, body = error_answer(request.url.path, status, message)
    return JSONResponse(body, status_code=status)


def validation_message(errors: list[Any]) -> str:
    """Pydantic's error list as one readable sentence."""
    parts = []
    for err in errors[:3]:
        if err.get("type") == "json_invalid":
            return f"the request body is not valid JSON: {err.get('ctx', {}).get('error', '')}"
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc)
        msg = str(err.get("msg", "invalid"))
        if where:
            parts.append(f"{where}: {msg[0].lower() + msg[1:] if msg else msg}")
        elif err.get("type") == "missing":
            parts.append("a JSON request body is required")
        else:
            parts.append(msg)
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "invalid request: " + "; ".join(parts) + more


# (exception class, status) for failures raised by the layers below the routes; a subclass
# comes before its base.
_MAPPED: tuple[tuple[type[Exception], int], ...] = (
    (InputTooLarge, 413),
    (RequestError, 400),
    (ModelFileMissing, 404),
    (ModelFailed, 500),
    # the runner failed while answering (crashed: a native abort, a device lost)
    (RunnerError, 500),
    (InvalidName, 400),
    (ModelNotFound, 404),
    (BlobError, 400),
    (TemplateError, 400),
    (GGUFError, 400),
    (ServerBusy, 503),
    (LoadFailed, 500),
    # placement options that cannot apply on this machine (a tensor_split for absent GPUs)
    (LayoutRequestError, 400),
    # Ollama answers 500 ("model requires more system memory (X) than is available (Y)");
    # 507 Insufficient Storage says it is this machine's memory, and retrying will not help
    # until memory is freed or the request asks for less (a smaller num_ctx).
    (ModelTooLarge, 507),
)


def install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return _answer(request, exc.status, exc.message)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _answer(request, 400, validation_message(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"{request.method} {request.url.path} is not an endpoint of this service"
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        response = _answer(request, exc.status_code, detail)
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        return response

    def mapped(status: int) -> Any:
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            return _answer(request, status, str(exc))

        return handler

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _answer(request, 500, f"internal error: {type(exc).__name__}: {exc}")

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    for cls, status in _MAPPED:
        app.add_exception_handler(cls, mapped(status))
    app.add_exception_handler(Exception, unexpected)
