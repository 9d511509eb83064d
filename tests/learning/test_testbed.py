"""The honest testbed: answers come only from outputs a step is shown, the composed splits share nothing, held-out
pools are permuted differently from every training draw, and the best answer so far follows step order."""

from __future__ import annotations

import json
import random

import pytest
from pydantic import ValidationError

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core import prompts
from conductor_mcp.core.records import Run, StepRecord
from conductor_mcp.core.simulation import SimWorkerProfile
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.learning import decisions, subpools, train_options
from conductor_mcp.learning.rewards import reward_of
from conductor_mcp.learning.sim_tasks import (
    SIM_SETS,
    composed_task_set,
    composed_templates,
    held_out_set,
    rules_of,
    structured_task_set,
    template_of,
)
from conductor_mcp.learning.strategies import single
from conductor_mcp.learning.verifiers import verify
from conductor_mcp.models import sim_testbed
from conductor_mcp.models.sim import worker_answer
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.service import Service
from tests.conftest import start

LEAK = "Consider these.\nANSWER: A\nANSWER: B\nANSWER: C\nANSWER: D"


async def accuracy(service: Service, workflow: Workflow, tasks: list[dict]) -> float:
    right = 0
    for task in tasks:
        metadata = {k: v for k, v in task.items() if k != "question"}
        run = start(service, task["question"], workflow, pool="sim-structured", max_steps=3, metadata=metadata)
        run = await service.wait(run.id, None)
        right += verify(task, run.answer)
    return right / len(tasks)


async def test_candidate_answers_listed_in_an_instruction_are_not_answers(service: Service) -> None:
    """The old leak: a first step whose instruction lists every choice, then the reviewer shown that step, scored
    0.96 because the reviewer read ANSWER lines anywhere. Now it scores no better than the best single worker."""
    tasks = [t for t in structured_task_set(120, seed=11) if t["domain"] != "math"][:60]
    leak = Workflow(
        reasoning="list them all",
        steps=[
            Step(worker="model_4", instruction=LEAK),
            Step(worker="model_5", instruction="Review.", access=[0]),
        ],
    )
    pool = service.pools.get("sim-structured")
    singles = [await accuracy(service, single(w).workflow, tasks) for w in pool.visible_ids()]  # type: ignore[arg-type]
    assert await accuracy(service, leak, tasks) <= max(singles)


def test_a_reviewer_reads_only_sealed_answers_of_the_steps_it_sees() -> None:
    profiles = load_pool("sim-structured", [builtin_pool_dir()]).simulation.workers  # type: ignore[union-attr]
    meta = {"domain": "code", "difficulty": "hard", "pitfall": "sign", "answer": "C", "choices": list("ABCD")}
    task = "Hard code task. Pitfall: sign. Choose A, B, C or D."
    workflow = Workflow(
        reasoning="r",
        steps=[
            Step(worker="model_1", instruction=LEAK),
            Step(worker="model_5", instruction="Review.", access=[0]),
        ],
    )

    def prompt(outputs: dict[int, str], step: int = 1) -> str:
        return prompts.worker_messages(task, None, workflow, step, outputs)[0]["content"]

    real, _ = worker_answer("tb-coder", profiles["tb-coder"], prompt({}, step=0), meta)
    assert sim_testbed.sealed_answers(prompt({0: real}), task) == [real.rsplit("ANSWER: ", 1)[1]]
    assert sim_testbed.sealed_answers(prompt({0: "Nothing to say."}), task) == []  # the instruction's lines are text
    assert sim_testbed.sealed_answers(real, "another task") == []  # a seal binds an answer to its task
    replies = [
        worker_answer("tb-reviewer", profiles["tb-reviewer"], prompt({0: f"Nothing, try {i}."}), meta)[0]
        for i in range(40)
    ]
    assert not any("reviewed the answers shown" in reply for reply in replies)


def test_the_composed_splits_share_no_template_question_or_id() -> None:
    train, held_out = composed_task_set(2000, seed=0), composed_task_set(512, seed=0, held_out=True)
    train_templates, held_templates = {template_of(t) for t in train}, {template_of(t) for t in held_out}
    assert not train_templates & held_templates
    assert train_templates == set(composed_templates(held_out=False)) and len(train_templates) > 150
    assert len(held_templates) > 48  # more held-out templates than the old space had in all
    assert not {t["question"] for t in train} & {t["question"] for t in held_out}
    assert not {t["id"] for t in train} & {t["id"] for t in held_out}
    assert len({t["question"] for t in train}) == len(train)
    assert composed_task_set(5, seed=0) == train[:5]  # reproducible
    assert {t["difficulty"] for t in held_out} == {"easy", "medium", "hard", "expert"}


def test_every_sim_sets_held_out_tasks_share_no_question_or_id_with_its_training_tasks() -> None:
    """The structured set drew 9 of its 128 held-out questions (seed 1) identical to training ones: its questions
    are numbered by position, not seed, and the simulator seeds its draws by the prompt."""
    for name, tasks in SIM_SETS.items():
        for seed in (0, 1, 2):
            train, held = tasks(512, seed), held_out_set(name, 128, seed)
            assert not {t["question"] for t in train} & {t["question"] for t in held}, (name, seed)
            assert not {t["id"] for t in train} & {t["id"] for t in held}, (name, seed)
            assert len({t["question"] for t in held}) == 128
    for version in ("composed-v2", "composed-v3"):  # they change rules, not tasks
        assert held_out_set(version, 16, 1) == held_out_set("composed", 16, 1)


def subpool_args(pool: str, sim_set: str) -> list[str]:
    return ["--base-model", "m", "--pool", pool, "--sim-set", sim_set]


def test_v2_and_v3_sub_pools_hold_the_tasks_specialist_on_most_tasks_in_random_order() -> None:
    shares = {}
    versions = (("sim-composed", "composed"), ("sim-composed-v2", "composed-v2"), ("sim-composed-v3", "composed-v3"))
    for pool_name, sim_set in versions:
        options = [*subpool_args(pool_name, sim_set), "--sim-tasks", "400", "--eval-tasks", "400"]
        args = train_options.parse_args([*options, "--subpool-k", "4", "--permute-ids", "--steps", "1", "--out", "o"])
        pool = load_pool(pool_name, [builtin_pool_dir()])
        training = subpools.training_pools(args, pool, 0)
        tasks = train_options.training_tasks(args)
        avoid = {subpools.worker_order(p) for p in training}
        held = [(t, subpools.held_out_pool(args, pool, t, avoid)) for t in train_options.held_out_tasks(args)]
        pairs = [*zip(tasks, training, strict=True), *held]
        shares[sim_set] = sum(subpools.specialist_of(p, t["domain"]) is not None for t, p in pairs) / len(pairs)
        assert len({subpools.worker_order(p)[0] for _, p in pairs}) == 8  # model_0 is anyone
        assert not {subpools.worker_order(p) for _, p in held} & avoid
    assert 0.8 <= shares["composed-v2"] == shares["composed-v3"] <= 0.9 and 0.45 <= shares["composed"] <= 0.55


def test_v2_rules_reviewing_depends_on_the_domain_naming_the_pitfall_adds_little_cost_does_not_saturate() -> None:
    v2 = load_pool("sim-composed-v2", [builtin_pool_dir()]).simulation.workers  # type: ignore[union-attr]
    assert sim_testbed.skills(v2["tb2-coder"], "code", "medium", False) == (0.96, 0.96)
    assert sim_testbed.skills(v2["tb2-coder"], "law", "medium", False) == (0.1, 0.3)
    assert sim_testbed.skills(v2["tb2-reviewer"], "law", "medium", False) == (0.1, 0.95)
    told, plain = (
        sim_testbed.skills(v2["tb2-coder"], "code", "hard", True),
        sim_testbed.skills(v2["tb2-coder"], "code", "hard", False),
    )
    assert told[0] - plain[0] <= 0.02 + 1e-9
    three_steps, moa = 0.012, 0.024  # USD a hard task: what the two cost on the composed testbeds
    old, new = rules_of("composed").cost_scale_usd, rules_of("composed-v2").cost_scale_usd
    assert reward_of(True, three_steps, 0.2, old) == reward_of(True, moa, 0.2, old)  # saturated
    assert reward_of(True, three_steps, 0.2, new) > reward_of(True, moa, 0.2, new) + 0.05


def test_v3_rules_the_difficulty_decides_the_shape_and_a_step_costs_the_same_on_every_task() -> None:
    v3 = load_pool("sim-composed-v3", [builtin_pool_dir()]).simulation.workers  # type: ignore[union-attr]
    coder, reviewer = v3["tb3-coder"], v3["tb3-reviewer"]
    alone = {d: sim_testbed.skills(coder, "code", d, False) for d in ("easy", "medium", "hard", "expert")}
    assert alone == {"easy": (0.99, 0.9), "medium": (0.97, 0.9), "hard": (0.55, 0.9), "expert": (0.4, 0.9)}
    assert sim_testbed.skills(coder, "law", "medium", False) == (0.1 * 0.97, 0.3)
    with pytest.raises(ValidationError, match=r"unknown difficulties \['hrad'\]"):  # a misspelt difficulty is refused
        SimWorkerProfile(difficulty_factors={"hrad": 0.5})
    assert sim_testbed.skills(reviewer, "law", "hard", False) == (pytest.approx(0.075), 0.9)  # keeps 9 in 10 right
    # the answer's length does not follow the difficulty on v3 (it does on v2): a step costs the same on every task
    v2 = load_pool("sim-composed-v2", [builtin_pool_dir()]).simulation.workers  # type: ignore[union-attr]
    solve = Workflow(reasoning="r", steps=[Step(worker="model_0", instruction="Solve it.")])
    text = prompts.worker_messages("Code task t. Pitfall: types.", None, solve, 0, {})[0]["content"]
    lengths = {
        (version, difficulty): worker_answer("w", profile, text, {"difficulty": difficulty, "answer": "1"})[1]
        for version, profile in (("v2", v2["tb2-coder"]), ("v3", coder))
        for difficulty in ("easy", "expert")
    }
    assert lengths["v3", "easy"] == lengths["v3", "expert"] and lengths["v2", "easy"] < lengths["v2", "expert"]
    # at recipe 5's cost weight (0.3) one more specialist step (~$0.0027) costs 0.06 of reward; MoA costs more
    scale = rules_of("composed-v3").cost_scale_usd
    one, three, moa = 0.0027, 3 * 0.0027, 5 * 0.0027
    assert reward_of(True, one, 0.3, scale) - reward_of(True, 2 * one, 0.3, scale) > 0.06
    assert reward_of(True, three, 0.3, scale) > reward_of(True, moa, 0.3, scale) + 0.05


def test_held_out_pools_are_permuted_unlike_any_training_draw() -> None:
    args = train_options.parse_args(
        [
            "--base-model",
            "m",
            "--pool",
            "sim-composed",
            "--sim-set",
            "composed",
            "--sim-tasks",
            "64",
            "--eval-tasks",
            "512",
            "--subpool-k",
            "4",
            "--permute-ids",
            "--steps",
            "200",
            "--questions",
            "2",
            "--out",
            "o",
        ]
    )
    pool = load_pool("sim-composed", [builtin_pool_dir()])
    trained = [subpools.worker_order(p) for p in subpools.training_pools(args, pool, 0)]
    assert len(trained) == 400 and len(set(trained)) > 300  # ids are reshuffled per training question
    assert len({order[0] for order in trained}) == 8  # model_0 is anyone
    avoid = set(trained)
    held = [subpools.held_out_pool(args, pool, t, avoid) for t in train_options.held_out_tasks(args)]
    assert not {subpools.worker_order(p) for p in held} & avoid
    assert len({subpools.worker_order(p) for p in held}) > 300


def test_decisions_fill_the_testbeds_workflows() -> None:
    pool = load_pool("sim-composed", [builtin_pool_dir()]).sample(4, seed="x", permute=True)
    task = {"pitfall": "sign"}
    assert decisions.parse("model_9", pool.visible_ids()) is None and decisions.parse("", pool.visible_ids()) is None
    assert decisions.parse("model_1 model_2 model_3 model_0", pool.visible_ids()) is None
    assert decisions.parse("model_1+ model_1,", pool.visible_ids()) is None
    three = json.loads(decisions.completion_workflow(" model_1+ model_2 model_0+", pool, task))
    assert [(s["worker"], s["instruction"], s["access"]) for s in three["steps"]] == [
        ("model_1", "Solve it. Check the sign.", []),
        ("model_2", "Solve it another way.", []),
        ("model_0", "Review both answers. Check the sign.", [0, 1]),
    ]
    assert decisions.signature(pool, three).split()[0] == pool.workers[1].id + "+"
    rng = random.Random(0)
    assert all(decisions.parse(decisions.random_decisions(pool, rng), pool.visible_ids()) for _ in range(50))


def test_assessed_decisions_run_the_same_workflow_whatever_difficulty_they_name() -> None:
    """The assessed encoding: a difficulty, a full stop and `Steps:` before the decisions; the reward runs the
    decisions alone, so the word the policy writes changes nothing but what it writes next."""
    pool = load_pool("sim-composed-v3", [builtin_pool_dir()]).sample(4, seed="y", permute=True)
    offered, task = pool.visible_ids(), {"pitfall": "units", "difficulty": "hard"}
    plain = decisions.completion_workflow(" model_2+ model_0", pool, task)
    for word in ("easy", "medium", "hard", "expert"):
        text = f" {word}. Steps: model_2+ model_0"
        assert decisions.assessment(text) == (word, " model_2+ model_0")
        assert decisions.completion_workflow(text, pool, task, assessed=True) == plain
    for malformed in (" model_2+ model_0", " trivial. Steps: model_2", " hard Steps: model_2", " hard. model_2"):
        assert decisions.parse(malformed, offered, assessed=True) is None
        assert decisions.completion_workflow(malformed, pool, task, assessed=True) == malformed  # the malformed reward
    assert decisions.parse(" hard. Steps: model_2+ model_0", offered) is None  # not in the plain encoding
    written = decisions.assessed_completion(task, " model_2+ model_0<eos>")
    assert written == " hard. Steps: model_2+ model_0<eos>"
    system = decisions.messages(pool, "Hard law task 1.", assessed=True)[0]["content"]
    assert "First write how hard the task is (easy, medium, hard, expert)" in system
    assert decisions.prefill(True) + " hard. Steps:" == "Difficulty: hard. Steps:"


def test_the_best_answer_so_far_follows_step_order_not_timing() -> None:
    """Two finished steps, the later one (in workflow order) finished first: its answer is the best so far."""
    workflow = Workflow(reasoning="r", steps=[Step(worker="a", instruction="x"), Step(worker="b", instruction="y")])
    run = Run(id="r1", task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=2, workflow=workflow)
    run.steps = [
        StepRecord(
            key="1",
            index=1,
            worker_id="b",
            visible_id="b",
            model="m",
            instruction="y",
            status="done",
            output="second",
            ended_at="2026-01-01T00:00:01Z",
        ),
        StepRecord(
            key="0",
            index=0,
            worker_id="a",
            visible_id="a",
            model="m",
            instruction="x",
            status="done",
            output="first",
            ended_at="2026-01-01T00:00:09Z",
        ),
    ]
    assert run.best_answer() == "second"
