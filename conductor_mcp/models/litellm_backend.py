"""The litellm backend: any provider litellm knows, with keys from the environment, usage and cost, retried by the
shared retry loop (retry.py) with litellm's exception classes. The direct HTTP path hands it what it cannot send
itself, and the simulator its calls.

Importing this module imports litellm (~3-4 s of CPU on a 2-core machine): only the router imports it, when a pool
first calls a model that needs it, or when the service warms its backends after the host's handshake. The embedded
model's calls never do.
"""

from __future__ import annotations

import gc
from typing import Any

import litellm
import openai
from litellm import exceptions

from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.models import retry
from conductor_mcp.models.backend import Call, Completion, request_for

litellm.suppress_debug_info = True  # otherwise litellm prints help banners to stdout: the MCP wire

RETRYABLE = (
    *retry.RETRYABLE,
    exceptions.RateLimitError,
    exceptions.Timeout,
    exceptions.APIConnectionError,
    exceptions.InternalServerError,
    exceptions.ServiceUnavailableError,
    exceptions.BadGatewayError,
)
# litellm's API error family (each a subclass of the openai SDK's), beside the direct path's.
API_ERRORS = (*retry.FAILED, *exceptions.LITELLM_EXCEPTION_TYPES, openai.OpenAIError)


def listed_price(model: str) -> tuple[float, float] | None:
    """USD per input and output token in litellm's price map, else None."""
    try:
        prompt_cost, _ = litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=0)
        _, completion_cost = litellm.cost_per_token(model=model, prompt_tokens=0, completion_tokens=1)
    except Exception:  # litellm raises for models it has no price for
        return None
    return float(prompt_cost), float(completion_cost)


def _cost(response: Any) -> float:
    """What a response litellm made cost, by litellm's figure for it."""
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


class LitellmBackend:
    """Calls through litellm, retried by the Providers' retry loop (its endpoints' concurrency limits)."""

    def __init__(self, retrier: retry.Retrier) -> None:
        self.retrier = retrier
        self._sessions = False  # whether litellm has sent a request over HTTP: its sessions then need closing

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        return await self.send(spec, call, request_for(spec, call))

    async def send(self, spec: ModelSpec, call: Call, request: dict[str, Any], *, remote: bool = True) -> Completion:
        """Send `request` through litellm until it answers; `remote` is false for a model litellm answers in this
        process (the simulator: no endpoint to limit, no session to close)."""
        call_litellm = litellm.atext_completion if spec.prompt_style == "completion" else litellm.acompletion
        self._sessions = self._sessions or remote

        async def via(arguments: dict[str, Any]) -> Any:
            return await call_litellm(**arguments)

        return await self.retrier.send(
            spec, call, request, via, _cost, remote=remote, retryable=RETRYABLE, failures=API_ERRORS
        )

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
