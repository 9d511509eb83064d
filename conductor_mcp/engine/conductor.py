"""The Conductor: prompt, constrained call, parse, repair, one retry, and a safe fallback.

Any litellm model can conduct ("prompted conductor"); a GRPO-trained one on vLLM uses the same code with its
own settings. The prompts themselves are in core/prompts.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.events import ProgressCallback, ProgressEvent
from conductor_mcp.core.pool import CONDUCTOR_ID, ConductorSpec, Pool
from conductor_mcp.core.records import ConductorCall, Run
from conductor_mcp.core.usage import ServerBudget
from conductor_mcp.core.workflow import Repair, Step, Workflow, parse_workflow, validate_workflow, workflow_json_schema
from conductor_mcp.engine.progress import emit
from conductor_mcp.errors import ProviderError, WorkflowError
from conductor_mcp.models.providers import Providers
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


def response_format(spec: ConductorSpec, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema in the form the backend takes: vLLM wants type json_schema; llama.cpp's server rejects that
    with a 500 and takes type json_object with the schema beside it."""
    if spec.structured_output == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "workflow", "schema": schema, "strict": True}}
    if spec.structured_output == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


@dataclass
class Plan:
    """The outcome of asking the conductor: always a runnable workflow, and how it was obtained."""

    workflow: Workflow
    calls: list[ConductorCall] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    fallback_reason: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list, repr=False)


class Conductor:
    """Asks a pool's conductor model for workflows, through the server's providers."""

    def __init__(self, providers: Providers) -> None:
        self.providers = providers

    async def plan_run(self, run: Run, pool: Pool, budget: ServerBudget, on_event: ProgressCallback | None) -> None:
        """Write the run's workflow (and, with self_correct, the conductor's look at the end), reporting progress;
        the calls are charged to the server's budget."""
        await emit(on_event, ProgressEvent("conductor_started", run.id, f"conductor {pool.conductor.model} planning"))
        plan = await self.plan(pool, run.task, run.context, run.max_steps, run.metadata)
        for call in plan.calls:
            budget.add(call)
        if run.self_correct and plan.workflow.steps[-1].worker != CONDUCTOR_ID:
            every_step = list(range(len(plan.workflow.steps)))
            look = Step(worker=CONDUCTOR_ID, instruction=prompts.SELF_CHECK_INSTRUCTION, access=every_step)
            plan.workflow.steps.append(look)
        run.workflow, run.conductor_calls = plan.workflow, plan.calls
        run.repairs, run.fallback_reason = plan.repairs, plan.fallback_reason
        message = f"workflow of {len(plan.workflow.steps)} steps" + (" (fallback)" if plan.fallback_reason else "")
        await emit(on_event, ProgressEvent("conductor_finished", run.id, message, total_steps=len(plan.workflow.steps)))

    async def plan(
        self, pool: Pool, task: str, context: str | None, max_steps: int, metadata: dict[str, Any] | None = None
    ) -> Plan:
        """Ask the conductor for a workflow; retry once with the error shown; else fall back to one step."""
        messages = prompts.conductor_messages(pool, max_steps, task, context)
        plan = await self._ask(pool, messages, max_steps, allow_empty=False, metadata=metadata)
        if plan.fallback_reason is None:
            return plan
        default = pool.default_visible_id()
        log.warning("conductor_fallback", reason=plan.fallback_reason, worker=default)
        plan.workflow = Workflow(
            reasoning=f"Fallback: {plan.fallback_reason}",
            steps=[Step(worker=default, instruction=prompts.FALLBACK_INSTRUCTION, access=[])],
        )
        return plan

    async def correct(
        self,
        pool: Pool,
        task: str,
        context: str | None,
        seen: list[tuple[str, str]],
        instruction: str,
        max_steps: int,
        metadata: dict[str, Any] | None = None,
    ) -> Plan:
        """The conductor as a worker: it reads the (instruction, answer) pairs it may see and writes a corrective
        workflow, or an empty one meaning the current answer stands. If it cannot answer usably, the answer stands.
        """
        messages = prompts.correction_messages(pool, max_steps, task, context, seen, instruction)
        plan = await self._ask(pool, messages, max_steps, allow_empty=True, metadata=metadata)
        if plan.fallback_reason is not None:
            plan.workflow = Workflow(reasoning=f"No usable correction ({plan.fallback_reason}): the answer stands.")
        return plan

    async def _ask(
        self,
        pool: Pool,
        messages: list[dict[str, Any]],
        max_steps: int,
        allow_empty: bool,
        metadata: dict[str, Any] | None,
    ) -> Plan:
        """One conductor call with constrained output, parsed and validated; one retry showing the fault.

        On failure the plan's workflow is empty and `fallback_reason` says why; the caller decides the fallback.
        """
        ids = pool.offered_ids()
        schema = workflow_json_schema(ids, max_steps, pool.conductor.max_text_chars, allow_empty)
        calls: list[ConductorCall] = []
        error = "no attempt made"
        for attempt in range(2):
            call = ConductorCall(model=pool.conductor.model)
            calls.append(call)
            try:
                result = await self.providers.complete(
                    pool.conductor,
                    messages,
                    label="conductor",
                    metadata=metadata,
                    response_format=response_format(pool.conductor, schema),
                    simulation=pool.simulation,
                )
            except ProviderError as exc:
                call.error = str(exc)
                call.attempts = exc.attempts
                error = f"conductor call failed: {exc}"
                break  # retries already happened inside the provider; asking again would not help
            call.raw_output = result.text
            call.prompt_tokens, call.completion_tokens = result.prompt_tokens, result.completion_tokens
            call.cost_usd, call.latency_s, call.attempts = result.cost_usd, result.latency_s, result.attempts
            try:
                workflow, repairs = validate_workflow(parse_workflow(result.text), ids, max_steps, allow_empty)
            except WorkflowError as exc:
                call.error = str(exc)
                error = f"unusable workflow: {exc}"
                log.info("conductor_output_rejected", attempt=attempt + 1, error=str(exc))
                messages = [
                    *messages[:2],
                    {"role": "assistant", "content": result.text},
                    prompts.retry_message(str(exc)),
                ]
                continue
            call.repairs = repairs
            return Plan(workflow=workflow, calls=calls, repairs=repairs, messages=messages[:2])
        return Plan(workflow=Workflow(), calls=calls, fallback_reason=error, messages=messages[:2])
