"""A small synchronous client of `hearth serve`'s native API, for the CLI.

Errors come back as `ServiceError` carrying the service's own sentence (its `{"error": ...}`),
including an error line in the middle of a stream.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

__all__ = ["HearthClient", "ServiceError", "ServiceUnreachable"]


class ServiceError(RuntimeError):
    """The service answered with an error; the message is its sentence."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ServiceUnreachable(ServiceError):
    """Nothing answers at the address."""


def _message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict):
        err = err.get("message")
    return str(err or f"the service answered HTTP {resp.status_code}")


class HearthClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or ""
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=5.0),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HearthClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_hearth(self) -> bool:
        """True when a Hearth service answers here (an Ollama server does not count)."""
        try:
            resp = self._http.get("/", timeout=2.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200 and resp.text.startswith("Hearth")

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise ServiceUnreachable(f"no Hearth service answers at {self.base_url}") from None
        except httpx.HTTPError as e:
            raise ServiceError(f"talking to {self.base_url} failed: {e}") from None
        if resp.status_code >= 400:
            raise ServiceError(_message(resp), resp.status_code)
        return resp

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        resp = self._request(method, path, json=body)
        return resp.json() if resp.content else {}

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST and yield NDJSON objects; an `{"error"}` line raises ServiceError."""
        try:
            with self._http.stream("POST", path, json=body) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise ServiceError(_message(resp), resp.status_code)
                for line in resp.iter_lines():
                    if not line.strip():
                        continue
                    obj = json.loads(line)
                    if "error" in obj:
                        raise ServiceError(str(obj["error"]))
                    yield obj
        except httpx.ConnectError:
            raise ServiceUnreachable(f"no Hearth service answers at {self.base_url}") from None
        except httpx.HTTPError as e:
            raise ServiceError(f"the connection to the service broke: {e}") from None

    # -- the endpoints the CLI uses -------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/api/tags").get("models", []))

    def show(self, model: str, verbose: bool = False) -> dict[str, Any]:
        return dict(self._json("POST", "/api/show", {"model": model, "verbose": verbose}))

    def ps(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/api/ps").get("models", []))

    def devices(self) -> dict[str, Any]:
        return dict(self._json("GET", "/api/hearth/devices"))

    def delete(self, model: str) -> None:
        self._request("DELETE", "/api/delete", json={"model": model})

    def copy(self, source: str, destination: str) -> None:
        self._request("POST", "/api/copy", json={"source": source, "destination": destination})

    def stop(self, model: str) -> None:
        self._json("POST", "/api/generate", {"model": model, "keep_alive": 0})

    def upload_blob(self, path: Path) -> str:
        """Send a file as a blob (when the service runs elsewhere); returns its digest."""
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
        digest = "sha256:" + h.hexdigest()
        with open(path, "rb") as f:
            self._request("POST", f"/api/blobs/{digest}", content=f, timeout=None)
        return digest

    def create(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        return self.stream("/api/create", {**body, "stream": True})
