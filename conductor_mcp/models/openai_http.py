"""The direct HTTP backend: a thin path for chat calls to OpenAI-compatible servers (`hosted_vllm/` models: vLLM,
llama.cpp, the embedded local models), beside litellm.

Measured on one 2-core machine against a loopback server (tools/bench_engine.py, CPU per call): a plain aiohttp
POST and JSON parse costs 0.1-0.16 ms, httpx 0.6-0.8 ms, `litellm.acompletion` on its `hosted_vllm/` route
2.9-3.5 ms: it builds the request in a thread-pool hand-off, a logging object, a price lookup even when the pool
prices the model, a pydantic response. None of that is configurable away, and a run makes ~4.5 calls, so this
path sends the request litellm would send (the same body, headers and key) and answers with what `Providers` reads
from litellm's (choices, usage), failing as litellm fails for the same HTTP statuses (http_errors.py: the same class
names, the same faults retried), so retries, fallbacks, attempts and redaction stay as they are, without importing
litellm (~3 s of CPU, more than the embedded model's answer on a resident server). Base-model text completions
(`prompt` for `messages`) go to `/completions` the same way: the embedded model's workers are all such calls, and
with them on this path a run on the local pool neither calls nor imports litellm. A call this path does not know how
to make exactly as litellm would (other providers, tools, litellm-only params such as `mock_response`) goes to
litellm.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import aiohttp

from conductor_mcp.config import proxy_configured
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.errors import MalformedResponse
from conductor_mcp.models import http_errors, retry
from conductor_mcp.models.backend import Call, Completion, Diagnose, pool_rates, request_for

if TYPE_CHECKING:
    from conductor_mcp.models.litellm_backend import LitellmBackend

PREFIX = "hosted_vllm/"
HEADERS = {"content-type": "application/json", "user-agent": "conductor-mcp"}
NO_KEY = "fake-api-key"  # what litellm sends as the bearer token of a hosted_vllm/ call without a key
# Chat parameters litellm passes through unchanged to a hosted_vllm/ server (checked against litellm 1.110 by
# capturing its request bodies); `extra_body` is merged into the body, as litellm does.
PASSED_THROUGH = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "response_format",
        "extra_body",
    }
)
# What Providers puts in litellm's arguments that is not part of the body; a call has `messages` (chat) or
# `prompt` (a base model's text completion).
CALL_FIELDS = frozenset({"model", "messages", "prompt", "api_base", "api_key", "timeout"})
PRICE_FIELDS = frozenset({"input_cost_per_token", "output_cost_per_token"})


def eligible(request: dict[str, Any]) -> bool:
    """Whether the litellm arguments `request` describe a chat or text completion this path makes exactly as
    litellm would."""
    if not str(request.get("model", "")).startswith(PREFIX) or not request.get("api_base"):
        return False
    return ("messages" in request) != ("prompt" in request) and set(
        request
    ) - CALL_FIELDS - PRICE_FIELDS <= PASSED_THROUGH


def body_of(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON body litellm sends for these arguments: the model's served name, the messages (or the prompt),
    the parameters, `extra_body`'s fields merged in."""
    text = "prompt" if "prompt" in request else "messages"
    body: dict[str, Any] = {"model": request["model"].removeprefix(PREFIX), text: request[text]}
    for key, value in request.items():
        if key in PASSED_THROUGH and key != "extra_body":
            body[key] = value
    body.update(request.get("extra_body") or {})
    return body


def parsed(text: str | bytes) -> Any:
    """A chat completion's JSON with attribute access (`response.choices[0].message.content`), as Providers reads
    litellm's response objects; JSON that is not an object reads as a response with no choices."""
    data = json.loads(text, object_hook=lambda fields: SimpleNamespace(**fields))
    return data if isinstance(data, SimpleNamespace) else SimpleNamespace()


class OpenAIHttp:
    """One aiohttp session per event loop for every OpenAI-compatible endpoint a Providers calls; its owner
    (Providers) closes it. aiohttp, not httpx: 0.10-0.16 ms of CPU per loopback call against httpx's 0.75-1.4 ms
    (httpcore scans every pooled connection per request, so its cost grows with the calls in flight). Concurrency
    is limited by Providers' per-endpoint semaphores, not here. Proxy variables are honoured, as litellm's own
    aiohttp transport honours them."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            # trust_env costs two thread hand-offs per request (proxy and netrc lookups): only where a proxy is set
            trust_env = proxy_configured()
            self._session = aiohttp.ClientSession(connector=connector, trust_env=trust_env, headers=HEADERS)
        return self._session

    async def chat(self, request: dict[str, Any]) -> Any:
        """POST one chat completion, or a text completion where the request has a `prompt`; litellm's exception
        failures for what fails (http_errors.py: the retry loop retries them as it does litellm's)."""
        model = request["model"]
        url = f"{request['api_base'].rstrip('/')}/{'completions' if 'prompt' in request else 'chat/completions'}"
        headers = {"authorization": f"Bearer {request.get('api_key') or NO_KEY}"}
        data = json.dumps(body_of(request)).encode()
        timeout = aiohttp.ClientTimeout(total=request["timeout"])
        try:
            async with self.session().post(url, data=data, headers=headers, timeout=timeout) as response:
                status, content = response.status, await response.read()
        except TimeoutError as exc:
            message = f"Timeout Error: {http_errors.PROVIDER} - {exc or 'no answer in time'}"
            raise http_errors.Timeout(message, model) from None
        except aiohttp.ClientError as exc:
            message = f"APIConnectionError: {http_errors.PROVIDER} - {exc}"
            raise http_errors.APIConnectionError(message, model) from None
        if status >= 400:
            raise http_errors.status_error(status, content, model)
        try:
            answer = parsed(content)
        except ValueError:  # a 200 whose body is not JSON: a provider fault, retried like any malformed answer
            text = content[:200].decode(errors="replace")
            raise MalformedResponse(f"{model} answered with a body that is not JSON: {text}") from None
        for choice in getattr(answer, "choices", None) or []:
            if isinstance(choice, SimpleNamespace):  # finish reasons in OpenAI's words, as litellm maps them
                choice.finish_reason = http_errors.finish_reason(getattr(choice, "finish_reason", None) or "")
        return answer

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class DirectBackend:
    """`hosted_vllm/` models: chat and text completions on the direct path, retried by the Providers' retry loop;
    what this path cannot send exactly as litellm would (tools, litellm-only params) goes to litellm, made (and
    imported, or waited for while the warm-up imports it) only then."""

    def __init__(self, retrier: retry.Retrier, litellm: Callable[[], Awaitable[LitellmBackend]]) -> None:
        self.retrier = retrier
        self.litellm = litellm
        self._http = OpenAIHttp()
        self._rates: dict[str, tuple[float, float]] = {}  # per model, for models the pool leaves unpriced

    async def complete(self, spec: ModelSpec, call: Call) -> Completion:
        return await self.send(spec, call, request_for(spec, call))

    async def send(
        self,
        spec: ModelSpec,
        call: Call,
        request: dict[str, Any],
        diagnose: Diagnose | None = None,
        rates: tuple[float, float] | None = None,
    ) -> Completion:
        """Send `request` (built for `spec`, or for the server that serves it) directly where it is eligible, priced
        at `rates` (USD per input and output token; by default the pool's price, else litellm's price map)."""
        if not eligible(request):
            return await (await self.litellm()).send(spec, call, request)
        cost = retry.priced(rates or self._direct_rates(spec))
        return await self.retrier.send(spec, call, request, self._http.chat, cost, diagnose=diagnose)

    def _direct_rates(self, spec: ModelSpec) -> tuple[float, float]:
        """USD per token of a direct call: the pool's price, else litellm's price map (as litellm would charge)."""
        if rates := pool_rates(spec):
            return rates
        if spec.model not in self._rates:  # litellm's price lookup costs more than the call: once per model
            from conductor_mcp.models.litellm_backend import listed_price

            self._rates[spec.model] = listed_price(spec.model) or (0.0, 0.0)
        return self._rates[spec.model]

    async def aclose(self) -> None:
        await self._http.aclose()
