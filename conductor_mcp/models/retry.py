"""The retry loop every retried model call takes (the direct HTTP path's, the embedded model's, litellm's, the
simulator's), with the endpoints' concurrency limits. It imports no provider SDK: the backends that call through
litellm hand it litellm's exception classes, so a run on the embedded model never loads litellm."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from conductor_mcp.core.limits import BACKOFF_MAX_S, DEFAULT_CONCURRENCY
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.core.records import Attempt, now
from conductor_mcp.errors import MalformedResponse, ProviderError
from conductor_mcp.models.backend import Call, Completion, Diagnose, answer_of, completion_of, failed
from conductor_mcp.models.http_errors import CallError, TransientError
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[Any]]
Cost = Callable[[Any], float]  # what a response cost, in USD
Errors = tuple[type[BaseException], ...]

# Transient faults, tried again after a backoff: the direct path's, no answer in time, a malformed 200.
RETRYABLE: Errors = (TransientError, asyncio.TimeoutError, MalformedResponse)
# What a provider may answer with after retries, and so what a fallback is for. Anything else raised in a call is
# ours (a bug): it is not hidden as a provider failure, and no other worker is paid for it.
FAILED: Errors = (CallError,)


def priced(rates: tuple[float, float]) -> Cost:
    """The cost of a response at `rates` (USD per input and output token), from its usage."""

    def cost(response: Any) -> float:
        usage = getattr(response, "usage", None)
        prompt, completion = (int(getattr(usage, name, 0) or 0) for name in ("prompt_tokens", "completion_tokens"))
        return prompt * rates[0] + completion * rates[1]

    return cost


def _backoff(base_s: float, attempt: int) -> float:
    """Exponential backoff with full jitter, so a storm of rate limits does not retry in lockstep."""
    return random.uniform(0, min(BACKOFF_MAX_S, base_s * 2**attempt))


class Retrier:
    """Sends calls until they answer, one Attempt per try. One per Providers, shared by its backends: its endpoints'
    concurrency limits are this server's."""

    def __init__(self, retry_base_s: float) -> None:
        self.retry_base_s = retry_base_s
        self._limits: dict[tuple[str, int], asyncio.Semaphore] = {}

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
        via: Send,
        cost: Cost,
        *,
        remote: bool = True,
        diagnose: Diagnose | None = None,
        retryable: Errors = RETRYABLE,
        failures: Errors = FAILED,
    ) -> Completion:
        """Send `request` `via` a path until it answers, retrying `retryable` faults; each try is an Attempt of
        `spec` (the pool's model, whatever server `request` names). `failures` are a provider's answers that a retry
        would meet again. `remote` is false for a model answered in this process (the simulator: no endpoint to
        limit); `diagnose` says why a failed call's server died (a dead server is never retried)."""
        for attempt in range(spec.max_retries + 1):
            started, sent_at = time.perf_counter(), now("microseconds")  # spans of calls nest in their step's
            try:
                async with self.limit(spec) if remote else contextlib.nullcontext(), asyncio.timeout(spec.timeout_s):
                    response = await via(request)
                answer = answer_of(spec, response)  # a malformed 200 is a provider fault: retried, then a fallback
            except retryable as exc:
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
            except failures as exc:  # 4xx and the like: the same request would fail again
                call.attempts.append(failed(spec, call.label, exc, started, sent_at))
                raise ProviderError(f"{spec.model}: {call.attempts[-1].error}", call.attempts) from None
            latency = time.perf_counter() - started
            call.attempts.append(
                Attempt(model=spec.model, worker=call.label, ok=True, latency_s=round(latency, 4), started_at=sent_at)
            )
            return completion_of(spec, response, answer, latency, call.attempts, cost(response))
        raise AssertionError("unreachable")  # the loop either returns or raises
