"""`hearth worker`: this machine's devices for another Hearth, over ggml's RPC protocol.

The protocol is ggml's (llama.cpp's `rpc-server` speaks it too, and either kind of worker serves
either kind of client). It has no authentication and no encryption, so the worker listens on
loopback unless `--host` says otherwise, and says so when it does not.
"""

from __future__ import annotations

import argparse
import sys

from ..engine.ml.rpc import RpcUnavailableError, serve
from ..hostport import is_loopback

__all__ = ["run_worker"]


def run_worker(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        print(f"hearth worker: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(
            f"hearth worker: listening on {args.host}: ggml's RPC protocol has no authentication, "
            "so anyone who can reach this port can use this machine's memory and compute; "
            "expose it only on a network you trust",
            file=sys.stderr,
        )
    print(f"hearth worker: serving on {args.host}:{args.port}", file=sys.stderr, flush=True)
    try:
        serve(args.host, args.port, threads=args.threads, cache_dir=args.cache_dir)
    except RpcUnavailableError as e:
        print(f"hearth worker: {e}", file=sys.stderr)
        return 1
    return 0
