"""Property tests: no tool argument, however malformed, crashes the server or escapes as an unreadable error."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import Client

from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service

TOOLS = {
    "orchestrate": ["task", "pool", "max_steps", "context", "wait_seconds", "max_usd", "max_tokens", "self_correct"],
    "plan": ["task", "pool", "max_steps", "context"],
    "continue_workflow": ["run_id", "feedback", "wait_seconds"],
    "runs": ["limit", "status"],
    "pools": [],
}
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats()
    | st.text(max_size=60)
    | st.sampled_from(["sim", "testpool", "../etc/passwd", "x" * 100_001, "done", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def calls(draw) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(TOOLS)))
    keys = draw(st.lists(st.sampled_from([*TOOLS[tool], "unexpected"]), unique=True, max_size=5)) if TOOLS[tool] else []
    return tool, {key: draw(values) for key in keys}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls())
def test_any_arguments_get_a_result_or_a_readable_error(service: Service, call: tuple[str, dict[str, Any]]) -> None:
    tool, arguments = call

    async def go():
        async with Client(build_server(Front(service))) as client:
            return await asyncio.wait_for(client.call_tool(tool, arguments), timeout=60)

    result = asyncio.run(go())
    assert result.content, (tool, arguments)
    if result.is_error:
        text = result.content[0].text
        # a crash reads exactly "Error executing tool <name>" (the SDK hides it); a handled error says what is wrong
        assert text.startswith(f"Error executing tool {tool}: ") and len(text) > len(tool) + 25, text
        assert "Traceback" not in text
    else:
        assert result.structured_content is not None
