"""The litellm backend: any provider litellm knows, with keys from the environment, retries with backoff, the
endpoints' concurrency limits, usage and cost. Its retry loop (`send`) also carries the direct HTTP path's calls
(which raise litellm's exception classes), the embedded model's and the simulator's, so every call that can be
retried is retried the same way.

Importing this module imports litellm (~4 s of CPU on a 2-core machine): only the router imports it, when a pool
first calls a model, or when the service warms its backends after the host's handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import litellm
import openai
from litellm import exceptions

from conductor_mcp.config import environment_value
from conductor_mcp.core.limits import BACKOFF_MAX_S, DEFAULT_CONCURRENCY
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.records import Attempt, now
from conductor_mcp.errors import MalformedResponse, ProviderError
from conductor_mcp.models.backend import Call, Completion, Diagnose, KeyUnavailable, answer_of, completion_of, failed
from conductor_mcp.models.completion import completion_prompt, completion_stops
from conductor_mcp.runtime.logs import get_logger, register_secret

log = get_logger(__name__)

litellm.suppress_debug_info = True  # otherwise litellm prints help banners to stdout: the MCP wire

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

Send = Callable[[dict[str, Any]], Awaitable[Any]]


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
        request["input_cost_per_token"] = spec.price.input_per_mtok / 1e6
        request["output_cost_per_token"] = spec.price.output_per_mtok / 1e6
    request.update({k: v for k, v in extra.items() if v is not None})
    return request


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


def listed_price(model: str) -> tuple[float, float] | None:
    """USD per input and output token in litellm's price map, else None."""
    try:
        prompt_cost, _ = litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=0)
        _, completion_cost = litellm.cost_per_token(model=model, prompt_tokens=0, completion_tokens=1)
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


def load_lazily_imported() -> None:
    """Make litellm load what its first call would (~80 modules it imports on demand, its default tokenizer: 0.35 s
    of CPU here) with a mocked call that sends nothing, so a server's warm-up spares its first run that. Measured:
    the first call then takes 0.02 s, and the two together cost what the first call alone did (0.38 s)."""
    litellm.completion(model="openai/warm-up", messages=[{"role": "user", "content": "-"}], mock_response="-")
    litellm.token_counter(text="-")  # the default encoding, which litellm's calls use (a model's may differ)


def _backoff(base_s: float, attempt: int) -> float:
    """Exponential backoff with full jitter, so a storm of rate limits does not retry in lockstep."""
    return random.uniform(0, min(BACKOFF_MAX_S, base_s * 2**attempt))


class LitellmBackend:
    """Calls through litellm, and the retry loop every retried call takes. One per Providers: its endpoints'
    concurrency limits are this server's."""

    def __init__(self, retry_base_s: float) -> None:
        self.retry_base_s = retry_base_s
        self._limits: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._sessions = False  # whether litellm has sent a request over HTTP: its sessions then need closing

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        return await self.send(spec, call, request_for(spec, call))

    def limit(self, spec: ModelSpec) -> asyncio.Semaphore:
        """The concurrency limit of the endpoint `spec` calls, as its pool entry declares it. Specs that declare
        different limits for one endpoint each get the limit they declare."""
        key = (spec.api_base or spec.model.split("/", 1)[0], spec.max_concurrency or DEFAULT_CONCURRENCY)
        if key not in self._limits:
            self._limits[key] = asyncio.Semaphore(key[1])
        return self._limits[key]

    async def send(
        self,
        spec: ModelSpec,
        call: Call,
        request: dict[str, Any],
        *,
        via: Send | None = None,
        rates: tuple[float, float] | None = None,
        remote: bool = True,
        diagnose: Diagnose | None = None,
    ) -> Completion:
        """Send `request` (through litellm, or `via` another path) until it answers, retrying transient faults;
        each try is an Attempt of `spec` (the pool's model, whatever server `request` names). `rates` prices a
        response `via` made; `remote` is false for a model litellm answers in this process (the simulator: no
        endpoint to limit, no session to close); `diagnose` says why a failed call's server died (a dead server is
        never retried)."""
        call_litellm = litellm.atext_completion if spec.prompt_style == "completion" else litellm.acompletion
        self._sessions = self._sessions or (remote and via is None)
        for attempt in range(spec.max_retries + 1):
            started, sent_at = time.perf_counter(), now("microseconds")  # spans of calls nest in their step's
            try:
                async with self.limit(spec) if remote else contextlib.nullcontext(), asyncio.timeout(spec.timeout_s):
                    response = await (via(request) if via else call_litellm(**request))
                answer = answer_of(spec, response)  # a malformed 200 is a provider fault: retried, then a fallback
            except RETRYABLE as exc:
                call.attempts.append(failed(spec, call.label, exc, started, sent_at))
                if diagnose is not None and (crash := await diagnose()):  # a dead server: say so, never retry it
                    call.attempts[-1].error = crash
                    raise ProviderError(f"{spec.model}: {crash}", call.attempts) from None
                if attempt == spec.max_retries:
                    raise ProviderError(f"{spec.model}: {call.attempts[-1].error}", call.attempts) from None
                delay = _backoff(self.retry_base_s, attempt)
                log.warning(
                    "provider_retry",
                    model=spec.model,
                    attempt=attempt + 1,
                    delay_s=round(delay, 3),
                    error=call.attempts[-1].error,
                )
                await asyncio.sleep(delay)
                continue
            except API_ERRORS as exc:  # 4xx and the like: the same request would fail again
                call.attempts.append(failed(spec, call.label, exc, started, sent_at))
                raise ProviderError(f"{spec.model}: {call.attempts[-1].error}", call.attempts) from None
            latency = time.perf_counter() - started
            call.attempts.append(
                Attempt(model=spec.model, worker=call.label, ok=True, latency_s=round(latency, 4), started_at=sent_at)
            )
            return completion_of(spec, response, answer, latency, call.attempts, _cost(response, rates))
        raise AssertionError("unreachable")  # the loop either returns or raises

    async def aclose(self) -> None:
        if self._sessions:
            await close_clients()


async def close_clients() -> None:
    """Close litellm's cached HTTP sessions on the event loop that opened them. Left to litellm's exit hook they
    are collected after the loop has closed, and asyncio prints "Unclosed client session" on stderr."""
    from litellm.llms.custom_httpx.aiohttp_transport import LiteLLMAiohttpTransport
    from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

    await close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()  # another user of litellm in this process gets new ones
    # litellm's cache cleanup reaches only the clients in its cache; its text-completion path (base-model workers,
    # now that chat calls take the direct path) holds its transport's session outside it, so those are found here.
    # type(), not isinstance(): on the openai SDK's lazy module proxies isinstance imports 1,130 modules (1.3-4 s)
    for transport in [o for o in gc.get_objects() if issubclass(type(o), LiteLLMAiohttpTransport)]:
        await transport.aclose()
