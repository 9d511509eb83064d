"""The warm start's targets: the pool's scripted sim conductor, and the first-step variant GRPO chooses between."""

from __future__ import annotations

import json

import pytest

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import comparison, decisions, subpools, train_options, warm_start
from conductor_mcp.learning.sim_tasks import composed_task_set, structured_task_set
from conductor_mcp.service.catalogue import load_pool


def test_the_warm_start_imitates_the_pools_scripted_conductor() -> None:
    pool = load_pool("sim-structured", [builtin_pool_dir()])
    task = structured_task_set(2, seed=4)[0]
    workflow = json.loads(warm_start.scripted_completion(pool, task, 3))
    assert all(task["pitfall"] in step["instruction"] for step in workflow["steps"])
    with pytest.raises(RequestError, match="simulated conductor"):
        warm_start.scripted_completion(load_pool("local", [builtin_pool_dir()]), task, 3)


@pytest.mark.parametrize("first_step_too", [False, True])
def test_first_step_too_pairs_each_multi_step_workflow_with_its_first_step(first_step_too: bool) -> None:
    pool = load_pool("sim-structured", [builtin_pool_dir()])
    tasks = structured_task_set(16, seed=1)
    rows = [{"prompt": f"prompt {i}", "task": json.dumps(t), "pool_name": pool.name} for i, t in enumerate(tasks)]
    pairs = warm_start.sft_rows(rows, {pool.name: pool}, 3, "<eos>", first_step_too)
    by_prompt: dict[str, list[dict]] = {}
    for pair in pairs:
        assert pair["completion"].endswith("<eos>")
        by_prompt.setdefault(pair["prompt"], []).append(json.loads(pair["completion"].removesuffix("<eos>")))
    assert list(by_prompt) == [r["prompt"] for r in rows]  # every task, in order, its full workflow first
    hard = {f"prompt {i}" for i, t in enumerate(tasks) if t["difficulty"] == "hard"}
    assert hard and len(hard) < len(tasks)
    for prompt, workflows in by_prompt.items():
        full = workflows[0]
        assert len(full["steps"]) == (3 if prompt in hard else 1)
        if first_step_too and prompt in hard:
            assert workflows[1:] == [{**full, "steps": full["steps"][:1]}]
        else:
            assert len(workflows) == 1


def permuted_rows(n: int, seed: int, draw: str) -> tuple[list[dict], list[Pool], list[dict[str, str]], dict[str, Pool]]:
    """n composed-v2 tasks, each with its own permuted 4-worker sub-pool (drawn from `draw`), as warm-start rows."""
    pool = load_pool("sim-composed-v2", [builtin_pool_dir()])
    tasks = composed_task_set(n, seed=seed)
    subs = [pool.sample(4, seed=f"{draw}{i}", permute=True) for i in range(len(tasks))]
    rows = [{"prompt": f"prompt {i}", "task": json.dumps(t), "pool_name": f"sub {i}"} for i, t in enumerate(tasks)]
    return tasks, subs, rows, {f"sub {i}": sub for i, sub in enumerate(subs)}


def test_the_specialist_warm_start_names_the_tasks_specialist_first_under_permuted_ids() -> None:
    tasks, subs, rows, pools = permuted_rows(48, seed=3, draw="t")
    pairs = warm_start.specialist_rows(rows, pools, "<eos>", seed=1)
    firsts, present = set(), 0
    for pair, sub, task in zip(pairs, subs, tasks, strict=True):
        assert pair["completion"].startswith(" ") and pair["completion"].endswith("<eos>")
        written = decisions.parse(pair["completion"].removesuffix("<eos>"), sub.visible_ids())
        assert written is not None, pair
        specialist = subpools.specialist_of(sub, task["domain"])
        if specialist is not None:
            present += 1
            assert sub.resolve(written[0][0]).id == specialist
            firsts.add(written[0][0])
    assert present >= 10 and len(firsts) >= 3  # the specialist's id differs from task to task: it must be read
    assert {
        len(decisions.parse(p["completion"].removesuffix("<eos>"), s.visible_ids()) or [])
        for p, s in zip(pairs, subs, strict=True)
    } == {1, 2, 3}  # shapes left to GRPO


def test_the_roles_warm_start_casts_specialist_and_reviewer_from_the_descriptions_in_every_shape() -> None:
    tasks, subs, rows, pools = permuted_rows(96, seed=5, draw="r")
    pairs = warm_start.roles_rows(rows, pools, "<eos>", seed=2)
    assert warm_start.CASTS == {1: ("S",), 2: ("S", "R"), 3: ("S", "S", "R")}  # the scripted conductor's casting
    shapes_by_difficulty: dict[str, set[int]] = {}
    reviewers, flags = set(), set()
    for pair, sub, task in zip(pairs, subs, tasks, strict=True):
        written = decisions.parse(pair["completion"].removesuffix("<eos>"), sub.visible_ids())
        assert written is not None, pair
        cast = comparison.roles(sub, task["domain"])
        workers = [worker for worker, _ in written]
        assert workers == [cast[role] for role in warm_start.CASTS[len(workers)]]
        shapes_by_difficulty.setdefault(task["difficulty"], set()).add(len(workers))
        flags.update(told for _, told in written)
        if len(workers) > 1 and cast["R"] != cast["S"]:
            reviewers.add(workers[-1])
    assert len(reviewers) >= 3  # the reviewer's id differs from sub-pool to sub-pool: it must be read
    assert flags == {True, False}
    assert all(shapes == {1, 2, 3} for shapes in shapes_by_difficulty.values())  # the shape is left to GRPO
    assert len(shapes_by_difficulty) == 4


def test_the_assessed_warm_start_copies_the_tasks_difficulty_before_the_same_decisions() -> None:
    """With --completion assessed every warm-start target starts with its task's own difficulty; the decisions
    after it are the plain warm start's, drawn by the same seed."""
    tasks, subs, rows, pools = permuted_rows(48, seed=6, draw="a")
    base = ["--base-model", "m", "--pool", "sim-composed-v2", "--sim-set", "composed-v2", "--sim-tasks", "8"]
    base += ["--sft-steps", "2", "--warm-start", "roles", "--out", "out", "--seed", "3"]
    plain = warm_start.pairs(train_options.parse_args([*base, "--completion", "decisions"]), rows, pools, "<eos>")
    assessed = warm_start.pairs(train_options.parse_args([*base, "--completion", "assessed"]), rows, pools, "<eos>")
    assert plain == warm_start.roles_rows(rows, pools, "<eos>", seed=3)
    for before, after, sub, task in zip(plain, assessed, subs, tasks, strict=True):
        assert after["prompt"] == before["prompt"]
        text = after["completion"].removesuffix("<eos>")
        assert decisions.assessment(text) == (task["difficulty"], before["completion"].removesuffix("<eos>"))
        assert decisions.parse(text, sub.visible_ids(), assessed=True) == decisions.parse(
            before["completion"].removesuffix("<eos>"), sub.visible_ids()
        )
    assert {t["difficulty"] for t in tasks} == {"easy", "medium", "hard", "expert"}


def test_the_assessed_encoding_needs_a_composed_set_and_a_decisions_warm_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["--base-model", "m", "--out", "out", "--completion", "assessed"]
    composed = ["--sim-tasks", "8", "--sim-set", "composed-v3", "--pool", "sim-composed-v3"]
    assert train_options.parse_args([*base, *composed, "--sft-steps", "2", "--warm-start", "roles"])
    with pytest.raises(SystemExit):
        train_options.parse_args([*base, "--sim-tasks", "8", "--sim-set", "structured"])
    assert "--completion assessed has the policy write a composed task's difficulty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_options.parse_args([*base, *composed, "--sft-steps", "2", "--warm-start", "scripted"])
    assert "warms up with --warm-start format, specialist or roles" in capsys.readouterr().err


def test_decision_warm_starts_go_with_the_decisions_completion_only(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--base-model", "m", "--sim-tasks", "8", "--sft-steps", "2", "--out", "out"]
    for warm in ("format", "specialist", "roles"):
        assert train_options.parse_args([*base, "--completion", "decisions", "--warm-start", warm]).warm_start == warm
        with pytest.raises(SystemExit):
            train_options.parse_args([*base, "--warm-start", warm])
        assert "warms up with --warm-start format, specialist or roles" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_options.parse_args([*base, "--completion", "decisions", "--warm-start", "scripted"])
