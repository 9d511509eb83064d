"""The embedded model's server process: llama.cpp's own OpenAI-compatible HTTP server, run in-process by
xllamacpp (prebuilt CPU wheels, so nothing is compiled on install), on a loopback port.

`local.LocalServers` starts it as `python -m conductor_mcp.models.local_runtime ...` in a child process of its
own, so that a crash of native code (an illegal instruction, say) ends the child, which the parent can then
diagnose, and never the MCP server. A managed child also ends when the process that started it is gone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import threading
from typing import Any

from conductor_mcp.core.limits import PARENT_CHECK_S


def default_threads() -> int:
    """One core left for the server that calls the model: on a 2-core machine llama.cpp's threads, which
    spin while they wait for each other, ran ~5x slower with 2 threads than with 1 once anything else ran."""
    return max(1, min(8, len(os.sched_getaffinity(0)) - 1))


def serve(model: str, alias: str, port: int, context_tokens: int, threads: int) -> object:
    """Start the server; it listens on 127.0.0.1:port (loopback only) until the returned object is dropped."""
    xllamacpp: Any = importlib.import_module("xllamacpp")  # a compiled module that ships no type stubs
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = {alias}
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = context_tokens
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.ui = False
    return xllamacpp.Server(params)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--alias", required=True, help="the model name the server answers to")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (default: the cores less one)")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone (a managed server)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = serve(args.model, args.alias, args.port, args.ctx, args.threads or default_threads())
    while not stop.wait(PARENT_CHECK_S):
        if args.parent_pid and os.getppid() != args.parent_pid:
            break  # the parent died without stopping us: nobody else will
    del server


if __name__ == "__main__":
    main()
