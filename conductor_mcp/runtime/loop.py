"""How a conductor-mcp process runs: on uvloop's event loop, and, for a server, with a garbage collector set for
many runs in flight at once."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Coroutine
from typing import Any

from conductor_mcp.core.limits import FULL_COLLECTION_EVERY, YOUNG_COLLECTION_EVERY


def prefer_bundled_price_map() -> None:
    """litellm fetches a remote price map when it is first imported (seconds of retries offline, a request to
    GitHub online) unless LITELLM_LOCAL_MODEL_COST_MAP is set, and it reads that switch from the environment only.
    So a process's entry point (`conductor-mcp`, each tool) calls this before litellm loads: the one environment
    variable the package sets, and only where the user has not set it. An application that imports the package
    sets it itself, if it wants the bundled map."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop where the platform has it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def skip_final_collections() -> None:
    """At a command's exit (an atexit hook): the interpreter's collections at exit walk every object its imports made
    (litellm, pydantic, the openai SDK), which kept `conductor-mcp run` alive 5-7 s after it printed its answer
    on a busy 2-core machine (0.3 s frozen). Frozen objects are skipped; the OS frees the memory anyway."""
    gc.freeze()


def settle_collector() -> None:
    """Once a server has loaded what its runs need (after its first client's handshake, with the model backends):
    take what imports and start-up allocated (litellm, pydantic, the MCP SDK: ~420k objects, a 0.2 s walk) out of
    the collector's reach for the process's life, and make young and full collections rarer (core/limits.py says
    why). Unreachable cycles are still freed, by the collections that remain."""
    gc.collect()
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, FULL_COLLECTION_EVERY)
