"""The simulator as a litellm custom provider (`sim/<name>`): for whoever calls litellm with a sim model, such as the
benchmarks' baselines (tools/bench_engine.py, tools/bench_load.py). The server never registers it: its sim calls
take the direct path (sim_backend.py), and sim.py stays free of litellm so a sim pool's first run waits for no
import of it."""

from __future__ import annotations

from typing import Any

import litellm
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import ChatCompletionMessageToolCall, Function

from conductor_mcp.models.sim import SIM_CALL, SimCall, SimReply, answer, finish_reason


class SimProvider(CustomLLM):
    """litellm custom provider serving every `sim/<name>` model (benchmarks and callers of litellm reach the
    simulator this way; the server's own calls take the direct path)."""

    async def acompletion(
        self,
        model: str,
        messages: list,
        api_base: str,
        custom_prompt_dict: dict,
        model_response: litellm.ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict,
        acompletion: Any = None,
        litellm_params: dict | None = None,
        logger_fn: Any = None,
        headers: dict | None = None,
        timeout: Any = None,  # noqa: ASYNC109 (litellm's signature; the provider's own deadline applies)
        client: Any = None,
    ) -> litellm.ModelResponse:
        call = ((litellm_params or {}).get("metadata") or {}).get(SIM_CALL)
        reply = await answer(model, messages, call if isinstance(call, SimCall) else SimCall(), optional_params)
        _fill(model_response.choices[0], reply)
        model_response.usage = litellm.Usage(  # type: ignore[attr-defined]
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            total_tokens=reply.prompt_tokens + reply.completion_tokens,
        )
        model_response.model = model
        return model_response


def _fill(choice: Any, reply: SimReply) -> None:
    """Put the reply into litellm's response: the text, or (the text withheld) the tool calls asked for."""
    choice.message.content, choice.finish_reason = reply.text, finish_reason(reply)
    if reply.calls:
        choice.message.tool_calls = [
            ChatCompletionMessageToolCall(id=f"sim_{n}", type="function", function=Function(name=name, arguments=a))
            for n, (name, a) in enumerate(reply.calls)
        ]


_provider = SimProvider()


def register() -> None:
    """Serve `sim/*` through litellm (idempotent)."""
    if not any(entry.get("provider") == "sim" for entry in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": "sim", "custom_handler": _provider})
