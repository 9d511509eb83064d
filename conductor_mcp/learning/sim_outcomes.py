"""A simulated workflow's outcome computed in-process: the same prompts, the same simulated workers, the same
verifier and reward as a run through the service (learning/rewards.py), without the service's store, executor and
litellm round trips. A run of a 3-step workflow takes ~90 ms through the service on this machine and well under
one here, which is what lets the testbed gate (tools/gate_testbed.py) score every fixed completion and train a
feature policy for thousands of rollouts in minutes. tests/learning/test_gate.py checks that both paths give the
same outcome, tokens and cost.

Only simulated pools without tools, context or the conductor as a worker: the testbeds' workflows.
"""

from __future__ import annotations

from typing import Any

from conductor_mcp.core import prompts
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.simulation import SimWorkerProfile
from conductor_mcp.core.workflow import parse_workflow, validate_workflow
from conductor_mcp.errors import RequestError, WorkflowError
from conductor_mcp.learning import datasets
from conductor_mcp.learning.rewards import Outcome, reward_of
from conductor_mcp.learning.verifiers import verify
from conductor_mcp.models import sim
from conductor_mcp.models.providers import price_per_token


def outcome(
    text: str,
    task: dict[str, Any],
    pool: Pool,
    max_steps: int,
    cost_weight: float = 0.0,
    cost_scale_usd: float = 0.01,
) -> Outcome:
    """What WorkflowReward.score gives this completion on this task and sub-pool."""
    try:
        workflow, _ = validate_workflow(parse_workflow(text), pool.offered_ids(), max_steps)
    except WorkflowError as exc:
        return Outcome(0.0, well_formed=False, error=str(exc))
    metadata = datasets.metadata(task)
    outputs: dict[int, str] = {}
    tokens, cost = 0, 0.0
    for i, step in enumerate(workflow.steps):
        name, profile = _profile(pool, step.worker)
        shown = {j: outputs[j] for j in step.access}
        prompt = sim.messages_text(prompts.worker_messages(task["question"], None, workflow, i, shown))
        outputs[i], completion_tokens = sim.worker_answer(name, profile, prompt, metadata)
        prompt_tokens = sim.token_count(prompt)
        rates = price_per_token(pool.spec_of(step.worker)) or (0.0, 0.0)
        tokens += prompt_tokens + completion_tokens
        cost += prompt_tokens * rates[0] + completion_tokens * rates[1]
    correct = verify(task, outputs[len(workflow.steps) - 1])
    reward = reward_of(correct, cost, cost_weight, cost_scale_usd)
    return Outcome(reward, True, correct, tokens, cost, len(workflow.steps))


def _profile(pool: Pool, visible_id: str) -> tuple[str, SimWorkerProfile]:
    """The simulated worker behind a visible id: its sim model name and profile."""
    model = pool.resolve(visible_id).model
    if not sim.is_simulated(model) or pool.simulation is None:
        raise RequestError(f"pool {pool.name!r}: worker {visible_id} is {model}, not a simulated worker")
    name = model.removeprefix(sim.PREFIX)
    return name, pool.simulation.workers.get(name, SimWorkerProfile())
