"""Cost estimates before calls are made: a workflow's cost range (the `plan` tool) and a next call's size."""

from __future__ import annotations

from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.core.prompts import worker_messages
from conductor_mcp.core.usage import CostEstimate
from conductor_mcp.core.workflow import Workflow
from conductor_mcp.models.providers import price_per_token


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


def estimate_cost(
    workflow: Workflow, pool: Pool, task: str, context: str | None, low_tokens: int = 150, high_tokens: int = 2000
) -> CostEstimate:
    """A cost range for running a workflow: the real prompts, with each answer assumed low..high tokens long."""
    totals = []
    for answer_tokens in (low_tokens, high_tokens):
        outputs = dict.fromkeys(range(len(workflow.steps)), "x" * (4 * answer_tokens))
        cost = 0.0
        for i, step in enumerate(workflow.steps):
            price = price_per_token(pool.spec_of(step.worker))
            if price:
                prompt = estimated_tokens(worker_messages(task, context, workflow, i, outputs))
                cost += prompt * price[0] + answer_tokens * price[1]
        totals.append(round(cost, 6))
    unpriced = sorted({s.worker for s in workflow.steps if not price_per_token(pool.spec_of(s.worker))})
    return CostEstimate(totals[0], totals[1], unpriced, f"each step answers in {low_tokens}-{high_tokens} tokens")
