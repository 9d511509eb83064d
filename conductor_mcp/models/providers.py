"""The one place that calls litellm: keys from the environment, retries, fallbacks, deadlines, usage and cost.

Workers, the conductor and simulated models all go through `Providers.complete`, so what tests and benchmarks
measure on the simulator is the same code path that real providers take.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import litellm
import openai
from litellm import exceptions

from conductor_mcp.config import Settings, environment_value
from conductor_mcp.core.host_model import HOST_MODEL, NO_HOST, HostModel
from conductor_mcp.core.limits import BACKOFF_MAX_S, DEFAULT_CONCURRENCY
from conductor_mcp.core.pool import ConductorSpec, ModelSpec, WorkerSpec
from conductor_mcp.core.records import Attempt, now
from conductor_mcp.core.simulation import SimulationConfig
from conductor_mcp.errors import HostDeclined, HostUnavailable, LocalModelError, MalformedResponse, ProviderError
from conductor_mcp.models import local, openai_http, sim
from conductor_mcp.models.completion import completion_prompt, completion_stops, end_of_answer
from conductor_mcp.runtime.logs import get_logger, redact, redact_values, register_secret

log = get_logger(__name__)

RETRYABLE = (
    exceptions.RateLimitError,
    exceptions.Timeout,
    exceptions.APIConnectionError,
    exceptions.InternalServerError,
    exceptions.ServiceUnavailableError,
    exceptions.BadGatewayError,
    asyncio.TimeoutError,
    MalformedResponse,
)
# What a provider may answer with, and so what a fallback is for: litellm's API error family (each a subclass of
# the openai SDK's), after retries. Anything else raised in a call is ours (a bug): it is not hidden as a provider
# failure, and no other worker is paid for it.
API_ERRORS = (*exceptions.LITELLM_EXCEPTION_TYPES, openai.OpenAIError)


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


def call_arguments(
    spec: ModelSpec, messages: list[dict[str, Any]], sim_call: sim.SimCall | None, **extra: Any
) -> dict[str, Any]:
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
        request["input_cost_per_token"] = spec.price.input_per_mtok / 1e6
        request["output_cost_per_token"] = spec.price.output_per_mtok / 1e6
    if sim_call is not None and sim.is_simulated(spec.model):
        # Task metadata carries reference answers for the simulator; it must never reach a real provider.
        request["metadata"] = {sim.SIM_CALL: sim_call}  # a fresh dict: litellm writes into the one it is given
    request.update({k: v for k, v in extra.items() if v is not None})
    return request


def price_per_token(spec: ModelSpec) -> tuple[float, float] | None:
    """USD per input and output token: the pool file's price, else litellm's price map, else None."""
    if spec.price:
        return spec.price.input_per_mtok / 1e6, spec.price.output_per_mtok / 1e6
    try:
        prompt_cost, _ = litellm.cost_per_token(model=spec.model, prompt_tokens=1, completion_tokens=0)
        _, completion_cost = litellm.cost_per_token(model=spec.model, prompt_tokens=0, completion_tokens=1)
    except Exception:  # litellm raises for models it has no price for
        return None
    return float(prompt_cost), float(completion_cost)


def _cost(response: Any, rates: tuple[float, float] | None) -> float:
    """What a response cost: at `rates` (USD per input and output token) for a call made on the direct path,
    else litellm's figure for it."""
    if rates is not None:
        usage = getattr(response, "usage", None)
        prompt, completion = (int(getattr(usage, name, 0) or 0) for name in ("prompt_tokens", "completion_tokens"))
        return prompt * rates[0] + completion * rates[1]
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    if cost is None:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:  # unpriced model (every hosted_vllm/* without a price in the pool file)
            cost = 0.0
    return float(cost or 0.0)


def _backoff(base_s: float, attempt: int) -> float:
    """Exponential backoff with full jitter, so a storm of rate limits does not retry in lockstep."""
    return random.uniform(0, min(BACKOFF_MAX_S, base_s * 2**attempt))


_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def sanitized(text: str) -> str:
    """Text that UTF-8, JSON and SQLite all take: lone surrogates (JSON can carry "\\ud800", UTF-8 cannot)
    and NULs become U+FFFD. A str never holds a valid surrogate pair, so every surrogate here is a lone one."""
    return _UNSTORABLE.sub("\ufffd", text)


def _failed(spec: ModelSpec, label: str | None, exc: BaseException, started: float, sent_at: str) -> Attempt:
    message = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} after {spec.timeout_s}s"
    return Attempt(
        model=spec.model,
        worker=label,
        ok=False,
        error=sanitized(redact(message)[:500]),
        latency_s=round(time.perf_counter() - started, 4),
        started_at=sent_at,
    )


def _answer(spec: ModelSpec, response: Any) -> tuple[Any, str]:
    """The first choice and its text, or MalformedResponse when a 200 response carries no usable text."""
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
    return choice, sanitized(text or "")


def _tool_calls(choice: Any) -> list[tuple[str, str]]:
    calls = getattr(getattr(choice, "message", None), "tool_calls", None) or []
    functions = [getattr(c, "function", None) for c in calls]
    asked = [(getattr(f, "name", None), getattr(f, "arguments", None)) for f in functions]
    return [(sanitized(name), sanitized(args or "{}")) for name, args in asked if isinstance(name, str)]


def _completion(
    spec: ModelSpec,
    response: Any,
    answer: tuple[Any, str],
    latency: float,
    attempts: list[Attempt],
    rates: tuple[float, float] | None,
) -> Completion:
    """What one successful response says: its text (from `_answer`), tool calls, usage, cost and who answered."""
    choice, text = answer
    usage = getattr(response, "usage", None)
    return Completion(
        tool_calls=[] if spec.prompt_style == "completion" else _tool_calls(choice),
        text=redact_values(end_of_answer(text) if spec.prompt_style == "completion" else text),
        finish_reason=getattr(choice, "finish_reason", None),
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost_usd=_cost(response, rates),
        latency_s=latency,
        answered_by=spec.model,
        attempts=attempts,
    )


async def _ask_host(
    host: HostModel | None, spec: ModelSpec, messages: list[dict[str, Any]], label: str | None, attempts: list[Attempt]
) -> Completion:
    """One sampling request to the host's model under the worker's own deadline. Never retried (its user may
    have declined it): a failure goes straight to the worker's fallbacks. Usage is what the host reported."""
    started, sent_at = time.perf_counter(), now("microseconds")
    preferences = spec.preferences if isinstance(spec, WorkerSpec) else None
    try:
        if host is None:
            raise HostUnavailable(NO_HOST)
        async with asyncio.timeout(spec.timeout_s):
            answer = await host.create_message(messages, spec.params, preferences)
    except (HostUnavailable, HostDeclined, TimeoutError) as exc:
        attempts.append(_failed(spec, label, exc, started, sent_at))
        raise ProviderError(f"{spec.model}: {attempts[-1].error}", attempts) from None
    latency = time.perf_counter() - started
    attempts.append(Attempt(model=spec.model, worker=label, ok=True, latency_s=round(latency, 4), started_at=sent_at))
    text, model = redact_values(sanitized(answer.text)), f"{HOST_MODEL}/{sanitized(answer.model)}"
    usage = (answer.prompt_tokens, answer.completion_tokens, 0.0)  # tokens as the host reported them; no cost here
    return Completion(text, answer.stop_reason, *usage, latency, model, attempts)


class Providers:
    """Model calls as this server is configured to make them: its retry backoff, its endpoints' concurrency
    limits, its local model servers and its overrides of the simulator. The service makes one (on its event loop)
    and hands it to the conductor and the executor."""

    def __init__(self, settings: Settings) -> None:
        litellm.suppress_debug_info = True  # otherwise litellm prints help banners to stdout: the MCP wire
        sim.register()  # `sim/*` models are a litellm provider
        self.retry_base_s = settings.retry_base_s
        self.sim_time_scale = settings.sim_time_scale
        self.sim_call_log = settings.sim_call_log
        self.local = local.servers(settings.state_dir)
        self._limits: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._http = openai_http.OpenAIHttp()  # the direct path to OpenAI-compatible servers
        self._rates: dict[
            str, tuple[float, float]
        ] = {}  # per model, for direct calls of models the pool leaves unpriced
        self.host: HostModel | None = None  # answers `model: host` workers: see `hosted`

    async def aclose(self) -> None:
        """Close the direct path's connections (litellm's own are closed by `close_clients`)."""
        await self._http.aclose()

    def _direct_rates(self, spec: ModelSpec) -> tuple[float, float]:
        """USD per token of a direct call: the pool's price, else litellm's price map (as litellm would charge)."""
        if spec.price:
            return spec.price.input_per_mtok / 1e6, spec.price.output_per_mtok / 1e6
        if spec.model not in self._rates:  # litellm's price lookup costs more than the call: once per model
            self._rates[spec.model] = price_per_token(spec) or (0.0, 0.0)
        return self._rates[spec.model]

    def hosted(self, host: HostModel | None) -> Providers:
        """These providers for one run whose `model: host` workers `host` answers (the MCP session that asked for
        it); the endpoints' limits and local servers stay shared."""
        if host is None:
            return self
        bound = copy.copy(self)
        bound.host = host
        return bound

    def _limit(self, spec: ModelSpec) -> asyncio.Semaphore | contextlib.nullcontext[None]:
        """The concurrency limit of the endpoint `spec` calls, as its pool entry declares it (simulated models are
        not limited). Specs that declare different limits for one endpoint each get the limit they declare."""
        if sim.is_simulated(spec.model):
            return contextlib.nullcontext()
        key = (spec.api_base or spec.model.split("/", 1)[0], spec.max_concurrency or DEFAULT_CONCURRENCY)
        if key not in self._limits:
            self._limits[key] = asyncio.Semaphore(key[1])
        return self._limits[key]

    async def complete(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        *,
        label: str | None = None,
        fallbacks: Sequence[tuple[str, ModelSpec]] = (),
        metadata: dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        simulation: SimulationConfig | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """Call `spec` (retrying transient faults), then each fallback in turn; raise ProviderError if all fail.

        `metadata` (the task's reference data) and `simulation` (the pool's sim profiles) reach sim models only;
        `tools` (the client's function tools) are offered to chat models, which may answer with calls of them.
        """
        sim_call = sim.SimCall(
            reference=metadata or {},
            simulation=simulation or SimulationConfig(),
            time_scale=self.sim_time_scale,
            call_log=self.sim_call_log,
        )
        attempts: list[Attempt] = []
        candidates: list[tuple[str | None, ModelSpec]] = [(label, spec), *fallbacks]
        for position, (name, candidate) in enumerate(candidates):
            try:
                if candidate.model == HOST_MODEL:
                    return await _ask_host(self.host, candidate, messages, name, attempts)
                return await self._call_with_retries(
                    candidate, messages, name, attempts, sim_call, response_format=response_format, tools=tools or None
                )
            except ProviderError as exc:
                if position + 1 < len(candidates):
                    log.warning(
                        "provider_fallback",
                        failed=candidate.model,
                        next=candidates[position + 1][1].model,
                        error=str(exc),
                    )
                    continue
                raise ProviderError(str(exc), attempts) from None
        raise AssertionError("unreachable")

    async def _served(self, spec: ModelSpec) -> ModelSpec:
        """The spec litellm can call: a `local/<name>` model becomes the llama.cpp server that serves it."""
        if not local.is_local(spec.model):
            return spec
        name = spec.model.removeprefix(local.PREFIX)
        base_url, params = await self.local.served(name, spec.params, conductor=isinstance(spec, ConductorSpec))
        return spec.model_copy(update={"model": f"hosted_vllm/{name}", "api_base": base_url, "params": params})

    async def _local_death(self, spec: ModelSpec) -> str | None:
        """Why a `local/<name>` model's server died, after a failed call to it; None for other models."""
        return await self.local.death(spec.model.removeprefix(local.PREFIX)) if local.is_local(spec.model) else None

    async def _call_with_retries(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        label: str | None,
        attempts: list[Attempt],
        sim_call: sim.SimCall,
        **extra: Any,
    ) -> Completion:
        try:
            request = call_arguments(await self._served(spec), messages, sim_call, **extra)
        except (KeyUnavailable, LocalModelError) as exc:
            attempts.append(Attempt(model=spec.model, worker=label, ok=False, error=str(exc)))
            raise ProviderError(f"{spec.model}: {exc}", attempts) from None
        if spec.prompt_style == "completion":
            request["prompt"] = completion_prompt(request.pop("messages"))
            request["stop"] = completion_stops(request.get("stop"))
            request.pop("response_format", None)
            request.pop("tools", None)  # a base model continues text: it cannot call tools
        direct = openai_http.eligible(request)
        call = litellm.atext_completion if spec.prompt_style == "completion" else litellm.acompletion
        for attempt in range(spec.max_retries + 1):
            started, sent_at = time.perf_counter(), now("microseconds")  # spans of calls nest in their step's
            try:
                async with self._limit(spec), asyncio.timeout(spec.timeout_s):
                    response = await (self._http.chat(request) if direct else call(**request))
                answer = _answer(spec, response)  # a malformed 200 is a provider fault: retried, then a fallback
            except RETRYABLE as exc:
                attempts.append(_failed(spec, label, exc, started, sent_at))
                if crash := await self._local_death(spec):  # a dead embedded server: say so, never retry it
                    attempts[-1].error = crash
                    raise ProviderError(f"{spec.model}: {crash}", attempts) from None
                if attempt == spec.max_retries:
                    raise ProviderError(f"{spec.model}: {attempts[-1].error}", attempts) from None
                delay = _backoff(self.retry_base_s, attempt)
                log.warning(
                    "provider_retry",
                    model=spec.model,
                    attempt=attempt + 1,
                    delay_s=round(delay, 3),
                    error=attempts[-1].error,
                )
                await asyncio.sleep(delay)
                continue
            except API_ERRORS as exc:  # 4xx and the like: the same request would fail again
                attempts.append(_failed(spec, label, exc, started, sent_at))
                raise ProviderError(f"{spec.model}: {attempts[-1].error}", attempts) from None
            latency = time.perf_counter() - started
            attempts.append(
                Attempt(model=spec.model, worker=label, ok=True, latency_s=round(latency, 4), started_at=sent_at)
            )
            rates = self._direct_rates(spec) if direct else None
            return _completion(spec, response, answer, latency, attempts, rates)
        raise AssertionError("unreachable")  # the loop either returns or raises


async def close_clients() -> None:
    """Close litellm's cached HTTP sessions on the event loop that opened them. Left to litellm's exit hook they
    are collected after the loop has closed, and asyncio prints "Unclosed client session" on stderr."""
    from litellm.llms.custom_httpx.aiohttp_transport import LiteLLMAiohttpTransport
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

    await close_litellm_async_clients()
    # litellm's cache cleanup reaches only the clients in its cache; its text-completion path (base-model workers,
    # now that chat calls take the direct path) holds its transport's session outside it, so those are found here.
    # type(), not isinstance(): on the openai SDK's lazy module proxies isinstance imports 1,130 modules (1.3-4 s)
    for transport in [o for o in gc.get_objects() if issubclass(type(o), LiteLLMAiohttpTransport)]:
        await transport.aclose()
