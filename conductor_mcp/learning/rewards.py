"""The reward of a conductor completion: run the workflow it wrote and check the answer (the paper's GRPO signal).

The completion is parsed and validated by the same code the server uses, run on the pool by the same executor,
and the final answer is checked by a verifier. A malformed completion earns 0, a well-formed workflow with a
wrong answer FORMAT_REWARD, a right answer 1; an optional cost term (at most COST_WEIGHT_LIMIT) rewards cheap
workflows without ever ranking a right answer below a wrong one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.core.request import RunRequest
from conductor_mcp.core.workflow import parse_workflow, validate_workflow
from conductor_mcp.errors import WorkflowError
from conductor_mcp.learning import datasets
from conductor_mcp.learning.verifiers import verify
from conductor_mcp.service.service import Service

FORMAT_REWARD = 0.1
CORRECT_REWARD = 1.0
COST_WEIGHT_LIMIT = 0.5


@dataclass
class Outcome:
    reward: float
    well_formed: bool
    correct: bool = False
    tokens: int = 0
    cost_usd: float = 0.0
    steps: int = 0
    error: str | None = None


def reward_of(correct: bool, cost_usd: float, cost_weight: float, cost_scale_usd: float) -> float:
    """A well-formed workflow's reward: 1 when right less the cost term (cost over the scale, capped at 1, times the
    weight), FORMAT_REWARD when wrong. The cap keeps a right answer above a wrong one; a scale below what
    workflows cost makes the term saturate (the composed testbed's 0.01: three steps cost what MoA costs)."""
    if not correct:
        return FORMAT_REWARD
    return CORRECT_REWARD - cost_weight * min(1.0, cost_usd / cost_scale_usd)


class WorkflowReward:
    """Scores completions by running their workflows; batches run concurrently."""

    def __init__(
        self,
        service: Service,
        max_steps: int,
        cost_weight: float = 0.0,
        cost_scale_usd: float = 0.01,
        allow_unsafe_local_exec: bool = False,  # code answers run without bubblewrap where it is missing
    ):
        if not 0 <= cost_weight <= COST_WEIGHT_LIMIT:
            raise ValueError(f"cost_weight must be between 0 and {COST_WEIGHT_LIMIT}, got {cost_weight}")
        self.service = service
        self.max_steps = max_steps
        self.cost_weight = cost_weight
        self.cost_scale_usd = cost_scale_usd
        self.allow_unsafe_local_exec = allow_unsafe_local_exec

    async def score(self, completion: str, task: dict[str, Any], pool: Pool) -> Outcome:
        self.service.pools.register(pool)
        try:
            workflow, _ = validate_workflow(parse_workflow(completion), pool.offered_ids(), self.max_steps)
        except WorkflowError as exc:
            return Outcome(0.0, well_formed=False, error=str(exc))
        request = RunRequest.of(
            task=task["question"], pool=pool.name, max_steps=self.max_steps, metadata=datasets.metadata(task)
        )
        run = self.service.start(request, workflow=workflow)
        run = await self.service.wait(run.id, None, cancel_on_exit=True)
        correct = await asyncio.to_thread(verify, task, run.answer, self.allow_unsafe_local_exec)
        reward = reward_of(correct, run.totals.cost_usd, self.cost_weight, self.cost_scale_usd)
        return Outcome(reward, True, correct, run.totals.total_tokens, run.totals.cost_usd, run.totals.steps, run.error)

    async def score_batch(
        self, completions: list[str], tasks: list[dict[str, Any]], pools: list[Pool]
    ) -> list[Outcome]:
        return list(
            await asyncio.gather(*(self.score(c, t, p) for c, t, p in zip(completions, tasks, pools, strict=True)))
        )
