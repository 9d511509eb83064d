"""The MCP host's own model as a worker: what the engine asks of it, and what a pool file may say about it.

A worker with `model: host` is answered by the model of the MCP client that asked for the run, through
`sampling/createMessage` on that client's session (doors/mcp/sampling.py speaks the protocol). The engine sees
only `HostModel`: one call with its own deadline, cancelled with its step, and the usage the client reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

HOST_MODEL = "host"  # a worker's `model`: the MCP host's own model, asked through sampling
HOST_ONLY_FIELDS = ("preferences",)
NO_HOST = (
    "no MCP session that answers sampling is attached to this run (it was started or resumed by a client without "
    "the sampling capability): continue_workflow from one that has it"
)
HOST_PARAMS = frozenset({"max_tokens", "temperature", "stop"})  # what a sampling request can carry
# A worker's fields that mean nothing for the host's model: the MCP client picks the model and reaches it.
_NOT_FOR_HOST = (
    "api_base",
    "api_key_env",
    "api_key_file",
    "price",
    "prompt_style",
    "max_concurrency",
    "max_retries",
    "tools",
    "sandbox",
    "max_tool_turns",
)


class HostPreferences(BaseModel):
    """The worker's hints to the host, sent as MCP `modelPreferences`: the host picks its model, these only steer."""

    model_config = ConfigDict(extra="forbid")
    hints: list[str] = Field(default_factory=list, max_length=8, description="model names, or parts of them, in order")
    cost_priority: float | None = Field(default=None, ge=0, le=1)
    speed_priority: float | None = Field(default=None, ge=0, le=1)
    intelligence_priority: float | None = Field(default=None, ge=0, le=1)


def check_host_worker(model: str, given: set[str], params: dict[str, Any]) -> None:
    """A pool file's worker entry, as far as the host's model is concerned: ValueError naming what is wrong."""
    if model != HOST_MODEL:
        if "preferences" in given:
            raise ValueError("'preferences' applies to the host's model only (model: host)")
        return
    wrong = [name for name in _NOT_FOR_HOST if name in given]
    if wrong:
        raise ValueError(f"{wrong} do not apply to the host's model: the MCP client picks and reaches it")
    unknown = sorted(set(params) - HOST_PARAMS)
    if unknown:
        raise ValueError(f"params of the host's model may be {sorted(HOST_PARAMS)}, not {unknown}")


@dataclass(frozen=True)
class HostAnswer:
    """What the host answered: its text, the model it says answered, why it stopped, and usage if it reported any
    (MCP's CreateMessageResult has no usage field; a client may put `usage` in `_meta`)."""

    text: str
    model: str
    stop_reason: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class HostModel(Protocol):
    """The host's model behind one MCP session (the one that asked for the run)."""

    async def create_message(
        self, messages: list[dict[str, Any]], params: dict[str, Any], preferences: HostPreferences | None
    ) -> HostAnswer:
        """One sampling request; `params` are the worker's (max_tokens, temperature, stop). Raises
        HostUnavailable when the session cannot carry it (ended, or no back-channel), ProviderError-like errors
        for a refusal."""
        ...
