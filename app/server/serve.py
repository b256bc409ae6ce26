"""`hearth serve`: run the service with uvicorn.

The socket is bound before uvicorn starts, so `--port 0` works: once start-up is done the
first line on stdout is `Hearth listening on http://HOST:PORT` (the GUI and `hearth run`'s
private service read the port from it). `--exit-on-stdin-close` ends the service when the
process that started it goes away (its end of our stdin closes).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from dataclasses import replace
from typing import Any

from .config import ConfigError, ServerConfig

__all__ = ["serve", "bind"]

READY_PREFIX = "Hearth listening on "


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _watch_stdin(server: Any) -> None:
    def wait() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        server.should_exit = True

    threading.Thread(target=wait, name="stdin-watch", daemon=True).start()


def serve(args: Any) -> int:
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:  %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per runner call otherwise
    try:
        config = ServerConfig.from_env(host=args.host, port=args.port)
        config.check_exposure()
    except ConfigError as e:
        sys.stderr.write(f"hearth: {e}\n")
        return 1
    try:
        sock = bind(config.host, config.port)
    except OSError as e:
        reason = e.strerror or str(e)
        sys.stderr.write(
            f"hearth: cannot listen on {config.host}:{config.port}: {reason} (is another "
            "`hearth serve` or Ollama running there? choose another with --port or "
            "HEARTH_HOST)\n"
        )
        return 1
    config = replace(config, port=sock.getsockname()[1])

    def ready() -> None:
        sys.stdout.write(f"{READY_PREFIX}{config.base_url}\n")
        sys.stdout.flush()

    app = create_app(config, on_ready=ready, log_devices=True)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=args.log_level,
            access_log=args.log_level == "debug",
            timeout_graceful_shutdown=5,
        )
    )
    if args.exit_on_stdin_close:
        _watch_stdin(server)
    server.run(sockets=[sock])
    return 0
