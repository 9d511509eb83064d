"""How simulated workers use the client's tools: a rule written for tests, not a model of any LLM.

A sim worker offered tools calls the tool its task names first (by exact name), once, with the JSON object
that follows the name in the task as its arguments (`{}` when none follows). When the client's results come
back it answers as usual and quotes each result on a `Tool result:` line, so a test can see they reached it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.limits import QUOTED_RESULT_CHARS


def requested_calls(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """The (name, JSON arguments) the worker asks for: one call of the tool its task names, or none."""
    if not tools or any(m.get("role") == "tool" for m in messages):
        return []
    first_user = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    task = prompts.read_task(first_user)
    names = [t.get("function", {}).get("name") for t in tools]
    found = [
        (match.start(), match.end(), name)
        for name in names
        if isinstance(name, str)
        for match in [re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", task)]
        if match
    ]
    if not found:
        return []
    _, end, name = min(found)
    return [(name, _arguments_after(task, end))]


def _arguments_after(text: str, position: int) -> str:
    rest = text[position:].lstrip()
    if rest.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            return "{}"
        if isinstance(value, dict):
            return json.dumps(value)
    return "{}"


def quoted_results(messages: list[dict[str, Any]]) -> str:
    """The `Tool result:` lines a worker adds once it has seen the client's results."""
    results = [" ".join(str(m.get("content") or "").split()) for m in messages if m.get("role") == "tool"]
    return "".join(f"\nTool result: {result[:QUOTED_RESULT_CHARS]}" for result in results)
