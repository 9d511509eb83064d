"""The testbed gate: in-process outcomes equal the service's, and on a small sample the gate passes on the composed
testbed v2 and fails on the composed testbed it replaces (where conducting barely pays)."""

from __future__ import annotations

import dataclasses
import json
import math
import random

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.learning import comparison, decisions, gate, sim_outcomes
from conductor_mcp.learning.rewards import WorkflowReward
from conductor_mcp.learning.sim_tasks import composed_task_set
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.service import Service


async def test_in_process_outcomes_are_the_services(service: Service) -> None:
    rng = random.Random(7)
    for name, scale in (("sim-composed", 0.01), ("sim-composed-v2", 0.04)):
        pool = load_pool(name, [builtin_pool_dir()])
        reward = WorkflowReward(service, 5, cost_weight=0.2, cost_scale_usd=scale)
        for i, task in enumerate(composed_task_set(12, seed=4)):
            sub = pool.sample(4, seed=f"t{i}", permute=True)
            text = decisions.completion_workflow(decisions.random_decisions(sub, rng), sub, task)
            if i % 4 == 0:
                text = json.dumps(comparison.moa(True)(sub, task))
            through_service = dataclasses.asdict(await reward.score(text, task, sub))
            in_process = dataclasses.asdict(sim_outcomes.outcome(text, task, sub, 5, 0.2, scale))
            for key in ("cost_usd", "reward"):  # the service sums the same costs in another order
                assert math.isclose(through_service.pop(key), in_process.pop(key), rel_tol=1e-9, abs_tol=1e-12)
            assert through_service == in_process


def test_fixed_completions_are_one_per_repetition_pattern_and_flags() -> None:
    fixed = gate.fixed_completions(4)
    assert len(fixed) == 2 + 2 * 4 + 5 * 8 == 50 and len(gate.all_completions(4)) == 8 + 8**2 + 8**3
    assert "model_0 model_1+ model_0" in fixed and "model_1 model_0" not in fixed


def test_the_gate_passes_on_v2_and_fails_on_the_composed_testbed() -> None:
    small = ["--tasks", "96", "--steps", "12", "--checks", "2"]
    v2 = gate.run(gate.parse_args(small))
    assert gate.verdict(v2) == (True, True)
    assert v2["policy_specialist_pick"] > 0.9 and v2["rollouts"] == 12 * 4 * 16
    assert "PASS" in gate.markdown(v2, "cmd") and "FAIL" not in gate.markdown(v2, "cmd")
    old = gate.run(gate.parse_args([*small, "--pool", "sim-composed", "--sim-set", "composed"]))
    assert not gate.verdict(old)[0]
    assert old["scripted_train"] - old["best_fixed_train"] < 0.1
