"""The host's own model over MCP sampling: a HostModel (core/host_model.py) for the session that asked for a run.

Where a server may send `sampling/createMessage` (MCP spec and SDK 2.3, read for this module):
- handshake-era connections (2025-11-25 and earlier) over stdio: at any time, on the one pipe;
- handshake-era streamable HTTP with sessions and SSE responses: while the tool call is open, on its POST's
  stream (related to the call); after it has returned, on the session's standalone GET stream, which the client
  opens (the SDK's client does). In JSON-response mode the call's own channel cannot carry it, and stateless
  HTTP has no channel at all: not offered;
- 2026-07-28-era connections: never. Servers must not send requests (stdio) and HTTP has no GET stream; sampling
  travels only inside an `input_required` result, which ends the call, and the feature is deprecated (SEP-2577).
So the host's model is offered when the client declares `sampling`, speaks a handshake-era version and the call's
channel can carry a request. The session reference lives as long as the run's task (it is handed to the run, not
kept anywhere else); once the session ends a call fails at once with HostUnavailable, naming the run's session.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import CreateMessageResult, ModelHint, ModelPreferences, SamplingMessage, TextContent
from mcp_types.jsonrpc import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from conductor_mcp.core.host_model import HostAnswer, HostPreferences
from conductor_mcp.core.limits import HOST_SAMPLING_MAX_TOKENS, MAX_REPORTED_TOKENS
from conductor_mcp.errors import HostDeclined, HostUnavailable


class SessionHost:
    """The host's model behind one MCP session; asked over the call's stream while it is open, then over the
    session's standalone channel."""

    def __init__(self, session: ServerSession, request_id: Any, client: str) -> None:
        self._session = session
        self._request_id = request_id
        self.client = client

    async def create_message(
        self, messages: list[dict[str, Any]], params: dict[str, Any], preferences: HostPreferences | None
    ) -> HostAnswer:
        system = "\n\n".join(_text(m) for m in messages if m.get("role") == "system") or None
        sampling = [
            SamplingMessage(
                role="assistant" if m.get("role") == "assistant" else "user",
                content=TextContent(type="text", text=_text(m)),
            )
            for m in messages
            if m.get("role") != "system"
        ]
        related = self._request_id if self._session.can_send_request else None  # the call has returned: standalone
        try:
            with warnings.catch_warnings():  # sampling is deprecated in the 2026-07-28 era, and what hosts answer
                warnings.simplefilter("ignore")
                result = await self._session.create_message(
                    sampling,
                    max_tokens=int(params.get("max_tokens") or HOST_SAMPLING_MAX_TOKENS),
                    system_prompt=system,
                    temperature=params.get("temperature"),
                    stop_sequences=_stops(params.get("stop")),
                    model_preferences=_preferences(preferences),
                    related_request_id=related,
                )
        except NoBackChannelError:
            raise HostUnavailable(f"the session of {self.client} cannot carry server requests any more") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise HostUnavailable(f"the MCP session of {self.client} that asked for this run has ended") from None
            raise HostDeclined(f"{self.client} answered sampling with an error: {exc}") from None
        return _answer(result, self.client)


def host_of(ctx: Context) -> SessionHost | None:
    """The host's model for this request, or None when its client cannot answer sampling here (see above)."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not ctx.session.can_send_request:
        return None
    info = ctx.session.client_params.client_info if ctx.session.client_params else None
    client = f"the MCP client {info.name!r}" if info is not None else "the MCP client"
    return SessionHost(ctx.session, ctx.request_context.request_id, client)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _stops(stop: Any) -> list[str] | None:
    if isinstance(stop, str):
        return [stop]
    return [s for s in stop if isinstance(s, str)] if isinstance(stop, list) else None


def _preferences(preferences: HostPreferences | None) -> ModelPreferences | None:
    if preferences is None:
        return None
    return ModelPreferences(
        hints=[ModelHint(name=hint) for hint in preferences.hints] or None,
        cost_priority=preferences.cost_priority,
        speed_priority=preferences.speed_priority,
        intelligence_priority=preferences.intelligence_priority,
    )


def _answer(result: CreateMessageResult, client: str) -> HostAnswer:
    """The host's answer: text content only (an image or audio answer is refused, naming its type)."""
    content = result.content
    if not isinstance(content, TextContent):
        raise HostDeclined(
            f"{client} answered with {getattr(content, 'type', type(content).__name__)} content, not text"
        )
    usage = (result.meta or {}).get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return HostAnswer(
        text=content.text,
        model=str(result.model)[:200],
        stop_reason=result.stop_reason,
        prompt_tokens=_count(usage.get("input_tokens", usage.get("prompt_tokens"))),
        completion_tokens=_count(usage.get("output_tokens", usage.get("completion_tokens"))),
    )


def _count(value: Any) -> int:
    return min(value, MAX_REPORTED_TOKENS) if isinstance(value, int) and value > 0 else 0
