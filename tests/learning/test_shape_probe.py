"""The shape probe's inputs and errors (its probabilities are checked against generate() in test_training.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.learning import comparison, decisions, shape_probe, warm_start
from conductor_mcp.learning.sim_tasks import composed_task_set, structured_task_set
from conductor_mcp.service.catalogue import load_pool

TOOL = Path(__file__).parents[2] / "tools" / "probe_shape.py"


def test_the_probe_stops_where_the_scripted_workflow_decides_to_go_on() -> None:
    pool = load_pool("sim-structured", [builtin_pool_dir()])
    hard = next(t for t in structured_task_set(8, seed=1) if t["difficulty"] == "hard")
    full = warm_start.scripted_completion(pool, hard, 3)
    prefix = shape_probe.first_step_prefix(pool, hard, 3)
    assert full.startswith(prefix + shape_probe.CONTINUATIONS["another step"])
    one_step = json.loads(prefix + shape_probe.CONTINUATIONS["end"])
    assert one_step["steps"] == json.loads(full)["steps"][:1]


def test_the_decisions_probe_stops_after_the_first_solver_the_scripted_conductor_casts() -> None:
    """In the decisions encoding the probe's context ends after one decision, the specialist told the pitfall, and
    its `another step` continuation is how a second decision starts."""
    pool = load_pool("sim-composed-v3", [builtin_pool_dir()])
    offered = pool.visible_ids()
    for task in composed_task_set(6, seed=3):
        first = shape_probe.first_decision(pool, task)
        specialist = comparison.roles(pool, task["domain"])["S"]
        assert decisions.parse(first, offered) == [(specialist, True)]
        second = first + shape_probe.ANOTHER_DECISION + offered[0].removeprefix("model")
        assert decisions.parse(second, offered) == [(specialist, True), (offered[0], False)]


def test_the_assessed_probe_writes_the_tasks_own_difficulty_before_the_first_solver() -> None:
    pool = load_pool("sim-composed-v3", [builtin_pool_dir()])
    offered = pool.visible_ids()
    for task in composed_task_set(6, seed=4):
        first = shape_probe.first_decision(pool, task, assessed=True)
        specialist = comparison.roles(pool, task["domain"])["S"]
        assert decisions.assessment(first) == (task["difficulty"], f" {specialist}+")
        second = first + shape_probe.ANOTHER_DECISION + offered[0].removeprefix("model")
        assert decisions.parse(second, offered, assessed=True) == [(specialist, True), (offered[0], False)]


@pytest.mark.slow  # a tool process
def test_a_folder_without_a_card_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"probe_shape: error: {tmp_path}: no card.json" in done.stderr
