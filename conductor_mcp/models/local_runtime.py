"""The embedded model's server process: llama.cpp's own OpenAI-compatible HTTP server, run in-process by
xllamacpp (prebuilt CPU wheels, so nothing is compiled on install), on a loopback port.

`local.LocalServers` starts it as `python -m conductor_mcp.models.local_runtime ...` in a child process of its
own, so that a crash of native code (an illegal instruction, say) ends the child, which the parent can then
diagnose, and never the MCP server. A managed child also ends when the process that started it is gone.

It has one slot per prompt family (the conductor's, the workers'), each keeping its last prompt's KV cache, and
with --slots a directory the slots can be saved to and restored from (llama.cpp's /slots endpoint), so a new
server starts with the conductor's prefix already evaluated. /metrics counts prompt tokens evaluated and cached
and tokens generated, with their seconds: what `run --verbose` reports.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import threading
from typing import Any

from conductor_mcp.core.limits import LOCAL_SLOTS, PARENT_CHECK_S


def default_threads() -> int:
    """One core left for the server that calls the model: on a 2-core machine llama.cpp's threads, which
    spin while they wait for each other, ran ~5x slower with 2 threads than with 1 once anything else ran."""
    return max(1, min(8, len(os.sched_getaffinity(0)) - 1))


def serve(model: str, alias: str, port: int, context_tokens: int, threads: int, slots_dir: str | None) -> object:
    """Start the server; it listens on 127.0.0.1:port (loopback only) until the returned object is dropped.
    `context_tokens` is each slot's context."""
    xllamacpp: Any = importlib.import_module("xllamacpp")  # a compiled module that ships no type stubs
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = {alias}
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_parallel = LOCAL_SLOTS
    params.n_ctx = context_tokens * LOCAL_SLOTS  # shared out among the slots
    params.endpoint_metrics = True
    if slots_dir:
        params.endpoint_slots = True
        params.slot_save_path = os.path.join(slots_dir, "")  # llama.cpp appends the file name to it as it is
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.ui = False
    return xllamacpp.Server(params)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--alias", required=True, help="the model name the server answers to")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx", type=int, default=4096, help="each slot's context window in tokens")
    parser.add_argument("--slots", help="a directory to save slots to and restore them from (/slots endpoint)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (default: the cores less one)")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone (a managed server)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    os.umask(0o077)  # saved slots hold prompts' KV cache: private, as the state directory they are in
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = serve(args.model, args.alias, args.port, args.ctx, args.threads or default_threads(), args.slots)
    while not stop.wait(PARENT_CHECK_S):
        if args.parent_pid and os.getppid() != args.parent_pid:
            break  # the parent died without stopping us: nobody else will
    del server


if __name__ == "__main__":
    main()
