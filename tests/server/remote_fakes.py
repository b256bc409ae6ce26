"""A local stand-in for Hugging Face and Ollama's registry, on 127.0.0.1, for pull tests.

It speaks both protocols as their projects document them:

* Hugging Face Hub: `GET /api/models/{repo}[/revision/{rev}]` (model info; with `?blobs=true`
  each sibling has `size` and `lfs: {sha256, size, pointerSize}`), `GET /api/models?search=`
  (search), `GET|HEAD /{repo}/resolve/{rev}/{file}` answering 302 to an absolute CDN URL with
  `X-Repo-Commit`, `X-Linked-Etag` (the LFS sha256, quoted) and `X-Linked-Size`, as
  `huggingface_hub.get_hf_file_metadata` reads them;
* an Ollama (Docker v2) registry: `GET /v2/{namespace}/{model}/manifests/{tag}` (content type
  `application/vnd.docker.distribution.manifest.v2+json`) and `GET
  /v2/{namespace}/{model}/blobs/sha256:{hex}` answering 307 to the CDN;
* the CDN: `GET|HEAD /cdn/{hex}` with `Range: bytes=a-b` (206, `Content-Range`), `ETag`.

Knobs for failures: a blob can be `tampered` (served bytes differ from its digest), the
server can `break_at` a fraction of a blob (connections drop there and later requests get
503 until `heal()`), and `delay` slows every chunk. `served[hex]` counts bytes sent.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
_CHUNK = 256 << 10


@dataclass
class Blob:
    size: int
    read: Callable[[int, int], bytes]  # [start, end)
    sha256: str
    tampered: bool = False


def bytes_blob(data: bytes) -> Blob:
    return Blob(len(data), lambda a, b: data[a:b], hashlib.sha256(data).hexdigest())


def pattern_blob(size: int, seed: int = 0) -> Blob:
    """`size` deterministic pseudo-random bytes, made on demand (a 1 MiB + 7 block repeated:
    cheap to serve at any offset, and no two chunks at different offsets are the same)."""
    period = (1 << 20) + 7
    base = random.Random(seed).randbytes(period)
    doubled = base + base

    def read(a: int, b: int) -> bytes:
        out = bytearray()
        while a < b:
            o = a % period
            n = min(b - a, period - o)
            out += doubled[o : o + n]
            a += n
        return bytes(out)

    h = hashlib.sha256()
    for start in range(0, size, 8 << 20):
        h.update(read(start, min(start + (8 << 20), size)))
    return Blob(size, read, h.hexdigest())


@dataclass
class Remote:
    """The fake's content and knobs (the handler reads them)."""

    blobs: dict[str, Blob] = field(default_factory=dict)
    hf: dict[str, dict[str, str]] = field(default_factory=dict)  # repo -> {file: hex}
    registry: dict[tuple[str, str, str], list[tuple[str, str]]] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    break_at: dict[str, int] = field(default_factory=dict)  # hex -> bytes served before it fails
    broken: bool = False
    delay: float = 0.0  # seconds per chunk
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, blob: Blob) -> str:
        self.blobs[blob.sha256] = blob
        return blob.sha256

    def add_hf_repo(self, repo: str, files: dict[str, Blob | bytes]) -> None:
        self.hf[repo] = {
            name: self.add(b if isinstance(b, Blob) else bytes_blob(b)) for name, b in files.items()
        }

    def add_registry_model(
        self, namespace: str, model: str, tag: str, layers: list[tuple[str, Blob | bytes]]
    ) -> list[tuple[str, str]]:
        out = [
            (f"application/vnd.ollama.image.{kind}",
             self.add(b if isinstance(b, Blob) else bytes_blob(b)))
            for kind, b in layers
        ]  # fmt: skip
        self.registry[(namespace, model, tag)] = out
        return out

    def heal(self) -> None:
        self.broken = False
        self.break_at.clear()
        self.served.clear()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    remote: Remote
    cdn: str  # the CDN's origin: another port, as the Hub's CDN is another host

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _json(self, status: int, data: Any, ctype: str = "application/json") -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _route(self, head: bool) -> None:
        r = self.remote
        url = urlsplit(self.path)
        path = unquote(url.path)
        r.requests.append(f"{self.command} {path}")
        if m := re.fullmatch(r"/cdn/([0-9a-f]{64})", path):
            return self._blob(m.group(1), head)
        if m := re.fullmatch(r"/v2/([^/]+)/([^/]+)/manifests/([^/]+)", path):
            layers = r.registry.get((m.group(1), m.group(2), m.group(3)))
            if layers is None:
                return self._json(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
            config = bytes_blob(b"{}")
            return self._json(
                200,
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST_TYPE,
                    "config": {
                        "mediaType": "application/vnd.docker.container.image.v1+json",
                        "digest": "sha256:" + config.sha256,
                        "size": config.size,
                    },
                    "layers": [
                        {"mediaType": t, "digest": "sha256:" + h, "size": r.blobs[h].size}
                        for t, h in layers
                    ],
                },
                MANIFEST_TYPE,
            )
        if m := re.fullmatch(r"/v2/([^/]+)/([^/]+)/blobs/sha256:([0-9a-f]{64})", path):
            if m.group(3) not in r.blobs:
                return self._json(404, {"errors": [{"code": "BLOB_UNKNOWN"}]})
            return self._empty(307, {"Location": f"{self.cdn}/cdn/{m.group(3)}"})
        if path == "/api/models":
            q = parse_qs(url.query)
            words = (q.get("search") or [""])[0].lower()
            found = [repo for repo in r.hf if words in repo.lower()]
            return self._json(200, [_card(repo, r.commit) for repo in found])
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
            return self._model_info(m.group(1), "blobs=true" in url.query)
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            files = r.hf.get(m.group(1))
            if files is None or m.group(3) not in files:
                return self._empty(404, {"X-Error-Code": "EntryNotFound"})
            h = files[m.group(3)]
            return self._empty(
                302,
                {
                    "Location": f"{self.cdn}/cdn/{h}",
                    "X-Repo-Commit": r.commit,
                    "X-Linked-Etag": f'"{h}"',
                    "X-Linked-Size": str(r.blobs[h].size),
                    "ETag": f'"{hashlib.sha1(h.encode()).hexdigest()}"',
                },
            )
        return self._json(404, {"error": "Not Found"})

    def _model_info(self, repo: str, blobs: bool) -> None:
        r = self.remote
        if repo not in r.hf:
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            body = b'{"error":"Repository not found"}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        siblings = []
        for name, h in r.hf[repo].items():
            entry: dict[str, Any] = {"rfilename": name}
            if blobs:
                size = r.blobs[h].size
                entry |= {
                    "size": size,
                    "blobId": hashlib.sha1(h.encode()).hexdigest(),
                    "lfs": {"sha256": h, "size": size, "pointerSize": 134},
                }
            siblings.append(entry)
        self._json(200, {**_card(repo, r.commit), "siblings": siblings})

    def _blob(self, h: str, head: bool) -> None:
        r = self.remote
        blob = r.blobs.get(h)
        if blob is None:
            return self._empty(404)
        if r.broken:
            return self._empty(503)
        start, end = 0, blob.size
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if rng:
            start = int(rng.group(1))
            end = min(int(rng.group(2)) + 1 if rng.group(2) else blob.size, blob.size)
            if start >= blob.size:
                return self._empty(416, {"Content-Range": f"bytes */{blob.size}"})
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", f'"{h}"')
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{blob.size}")
        self.end_headers()
        if head:
            return
        for a in range(start, end, _CHUNK):
            b = min(a + _CHUNK, end)
            data = blob.read(a, b)
            if blob.tampered and a == 0:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            with r.lock:
                limit = r.break_at.get(h)
                if r.broken or (limit is not None and r.served.get(h, 0) >= limit):
                    r.broken = True
                    self.close_connection = True
                    return  # the connection drops mid-body
                r.served[h] = r.served.get(h, 0) + len(data)
            if r.delay:
                time.sleep(r.delay)
            try:
                self.wfile.write(data)
            except OSError:
                return


def _card(repo: str, commit: str) -> dict[str, Any]:
    return {
        "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
        "id": repo,
        "modelId": repo,
        "sha": commit,
        "private": False,
        "gated": False,
        "disabled": False,
        "downloads": 1000,
        "likes": 10,
        "tags": ["gguf"],
        "pipeline_tag": "text-generation",
        "library_name": "gguf",
        "createdAt": "2025-01-01T00:00:00.000Z",
    }


@contextmanager
def serve(remote: Remote) -> Iterator[str]:
    """Run the fake on 127.0.0.1 (the hub and registry on one free port, the CDN on another,
    so redirects leave the origin as they do on the real sites); yields the hub's URL."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Handler) for _ in range(2)]
    hub, cdn = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    handler = type("Handler", (_Handler,), {"remote": remote, "cdn": cdn})
    for server in servers:
        server.daemon_threads = True
        server.RequestHandlerClass = handler
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
