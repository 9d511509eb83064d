"""The one interface every model backend answers through, and what they share: the call handed to them, the
completion they answer with, the arguments a call is made with, and how a response or a failure becomes an Attempt.

Five backends answer model calls, one module each: litellm (litellm_backend.py, any provider litellm knows), the
direct HTTP path (openai_http.py, OpenAI-compatible servers), the MCP host's model (host_backend.py), the embedded
llama.cpp model (local_backend.py) and the simulator (sim_backend.py). `Providers` (providers.py) picks one per
model and imports it only when a pool first calls a model it serves, so this module, and the router, import no
provider SDK: a server answers its host's handshake without loading litellm.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from conductor_mcp.config import environment_value
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.records import Attempt
from conductor_mcp.core.simulation import SimulationConfig
from conductor_mcp.errors import MalformedResponse, ProviderError
from conductor_mcp.models.completion import completion_prompt, completion_stops, end_of_answer
from conductor_mcp.runtime.logs import redact, redact_values, register_secret

Diagnose = Callable[[], Awaitable[str | None]]  # why a call's server died after a failed call, or None


class KeyUnavailable(Exception):
    """The key a pool names for a model cannot be read: that worker cannot be called (its fallbacks may be)."""


@dataclass
class Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    answered_by: str
    attempts: list[Attempt] = field(default_factory=list)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, JSON arguments) of the client's tools


@dataclass
class Call:
    """One model call as the router hands it to a backend. `attempts` is shared by a call's fallbacks: each backend
    appends one Attempt per try. `reference` (the task's reference data) and `simulation` (the pool's sim profiles)
    are read by the simulator only; `extra` holds the call's own arguments (response_format, tools)."""

    messages: list[dict[str, Any]]
    label: str | None
    attempts: list[Attempt]
    reference: dict[str, Any] = field(default_factory=dict)
    simulation: SimulationConfig | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def refused(self, spec: ModelSpec, reason: Exception) -> ProviderError:
        """A call that could not be sent (no key, no server): recorded as a failed attempt, never retried."""
        self.attempts.append(Attempt(model=spec.model, worker=self.label, ok=False, error=str(reason)))
        return ProviderError(f"{spec.model}: {reason}", self.attempts)


class Backend(Protocol):
    """One way of answering model calls. The router (providers.py) owns each backend it made and closes it."""

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        """Answer `call` with `spec` (retrying what this backend retries), appending an Attempt per try to
        `call.attempts`; ProviderError when it cannot (the router then tries the worker's fallbacks)."""
        ...

    async def aclose(self) -> None:
        """Close the connections and servers this backend opened."""
        ...


def call_arguments(spec: ModelSpec, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The litellm keyword arguments for one call (benchmarks make bare litellm calls with them). The key is read
    from the environment at call time."""
    request: dict[str, Any] = {**spec.params, "model": spec.model, "messages": messages, "timeout": spec.timeout_s}
    if spec.api_key_env:
        key = environment_value(spec.api_key_env)
        if not key:
            raise KeyUnavailable(f"environment variable {spec.api_key_env} is not set")
        request["api_key"] = key
        register_secret(key)
    elif spec.api_key_file:
        try:
            request["api_key"] = Path(spec.api_key_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise KeyUnavailable(f"cannot read the key file named by api_key_file: {exc.strerror}") from None
        register_secret(request["api_key"])
    if spec.api_base:
        request["api_base"] = spec.api_base
    if spec.price:
        request["input_cost_per_token"], request["output_cost_per_token"] = spec.price.per_token()
    request.update({k: v for k, v in extra.items() if v is not None})
    return request


def pool_rates(spec: ModelSpec) -> tuple[float, float] | None:
    """USD per input and output token as the pool file prices `spec`, else None."""
    return spec.price.per_token() if spec.price else None


def request_for(spec: ModelSpec, call: Call) -> dict[str, Any]:
    """`call_arguments` for one call, in the form its prompt style takes: a base model (`completion`) gets one
    Question/Answer prompt and stop sequences, and no response format or tools. A key that cannot be read is a
    refused call (ProviderError)."""
    try:
        request = call_arguments(spec, call.messages, **call.extra)
    except KeyUnavailable as exc:
        raise call.refused(spec, exc) from None
    if spec.prompt_style == "completion":
        request["prompt"] = completion_prompt(request.pop("messages"))
        request["stop"] = completion_stops(request.get("stop"))
        request.pop("response_format", None)
        request.pop("tools", None)  # a base model continues text: it cannot call tools
    return request


_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def sanitized(text: str) -> str:
    """Text that UTF-8, JSON and SQLite all take: lone surrogates (JSON can carry "\\ud800", UTF-8 cannot)
    and NULs become U+FFFD. A str never holds a valid surrogate pair, so every surrogate here is a lone one."""
    return _UNSTORABLE.sub("\ufffd", text)


def failed(spec: ModelSpec, label: str | None, exc: BaseException, started: float, sent_at: str) -> Attempt:
    message = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} after {spec.timeout_s}s"
    return Attempt(
        model=spec.model,
        worker=label,
        ok=False,
        error=sanitized(redact(message)[:500]),
        latency_s=round(time.perf_counter() - started, 4),
        started_at=sent_at,
    )


def answer_of(spec: ModelSpec, response: Any) -> tuple[Any, str]:
    """The first choice and its text (a base model's cut where its answer ends), or MalformedResponse when a 200
    response carries no usable text."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedResponse(f"{spec.model} answered with no choices")
    choice = choices[0]
    if spec.prompt_style == "completion":
        text = getattr(choice, "text", None)
    else:
        message = getattr(choice, "message", None)
        if message is None:
            raise MalformedResponse(f"{spec.model} answered with a choice that has no message")
        text = getattr(message, "content", None)
    if text is not None and not isinstance(text, str):
        raise MalformedResponse(f"{spec.model} answered with {type(text).__name__} content where text was expected")
    if spec.prompt_style != "completion":
        return choice, sanitized(text or "")
    answer = end_of_answer(sanitized(text or ""))  # a base model writes on past its answer
    if not answer:  # it stopped before answering (a stop sequence first, blank lines): another draw may answer
        raise MalformedResponse(f"{spec.model} wrote no answer before its answer ended ({text!r:.80})")
    return choice, answer


def _tool_calls(choice: Any) -> list[tuple[str, str]]:
    calls = getattr(getattr(choice, "message", None), "tool_calls", None) or []
    functions = [getattr(c, "function", None) for c in calls]
    asked = [(getattr(f, "name", None), getattr(f, "arguments", None)) for f in functions]
    return [(sanitized(name), sanitized(args or "{}")) for name, args in asked if isinstance(name, str)]


def completion_of(
    spec: ModelSpec, response: Any, answer: tuple[Any, str], latency: float, attempts: list[Attempt], cost: float
) -> Completion:
    """What one successful response says: its text (from `answer_of`), tool calls, usage, cost and who answered."""
    choice, text = answer
    usage = getattr(response, "usage", None)
    return Completion(
        tool_calls=[] if spec.prompt_style == "completion" else _tool_calls(choice),
        text=redact_values(text),
        finish_reason=getattr(choice, "finish_reason", None),
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=cost,
        latency_s=latency,
        answered_by=spec.model,
        attempts=attempts,
    )
