"""`serve` is ready before its host asks: the MCP handshake imports nothing that only model calls need (litellm, the
provider SDKs, the OpenTelemetry exporter, the training stack), and the service loads its model backends in a
worker thread after it, so the first run finds them loaded."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from mcp import StdioServerParameters
from mcp.client import Client

from tests.conftest import server_env

pytestmark = [pytest.mark.slow]

# `conductor-mcp serve`, with an import hook that refuses those modules on the main thread (the event loop's): there
# the handshake would wait for them. The service's warm-up imports them in a worker thread, which the hook allows.
SERVE_GUARDED = textwrap.dedent(
    """
    import sys, threading
    MODEL_CALLS_ONLY = ("litellm", "openai", "opentelemetry.exporter", "torch", "transformers", "trl")

    class OffTheLoopOnly:
        def find_spec(self, name, path=None, target=None):
            if name in MODEL_CALLS_ONLY and threading.current_thread() is threading.main_thread():
                raise ImportError(f"{name} was imported on the event loop's thread")
            return None

    sys.meta_path.insert(0, OffTheLoopOnly())
    from conductor_mcp.cli.commands import main

    sys.exit(main(["serve"]))
    """
)


async def test_the_handshake_imports_no_model_client_and_the_first_run_finds_them_loaded(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVE_GUARDED], env=server_env(tmp_path))
    async with Client(params, mode="legacy") as client:  # initialize: refused litellm would end the server here
        tools = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("orchestrate", {"task": "What is 6 * 7?", "pool": "sim"})
    assert {"orchestrate", "plan", "continue_workflow"} <= tools
    assert result.structured_content["status"] == "done", result.structured_content  # litellm came off the loop
