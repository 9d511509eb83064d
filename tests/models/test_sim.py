"""The simulator: reproducible, calibrated to its profiles, and reached through litellm like any model."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core import prompts
from conductor_mcp.core.pool import ModelSpec, Pricing, parse_pool
from conductor_mcp.core.simulation import SimConductorProfile, SimWorkerProfile
from conductor_mcp.core.workflow import Step, Workflow, parse_workflow, validate_workflow
from conductor_mcp.errors import WorkflowError
from conductor_mcp.models import sim_testbed
from conductor_mcp.models.providers import Providers
from conductor_mcp.models.sim import conductor_output, worker_answer
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, sim_pool_doc, write_pool

META = {"domain": "math", "answer": "42"}


def _answer(text: str) -> str:
    return text.rsplit("ANSWER:", 1)[1].strip()


def test_worker_is_deterministic_in_its_inputs() -> None:
    profile = SimWorkerProfile(skills={"math": 0.5})
    prompt = "# Task\nx\n\n# Your instruction\nsolve"
    assert worker_answer("a", profile, prompt, META) == worker_answer("a", profile, prompt, META)
    answers = {_answer(worker_answer("a", profile, prompt + str(i), META)[0]) for i in range(40)}
    assert "42" in answers and len(answers) > 1


@pytest.mark.parametrize("skill", [0.2, 0.5, 0.9])
def test_accuracy_matches_skill(skill: float) -> None:
    profile = SimWorkerProfile(skills={"math": skill})
    n = 2000
    right = sum(
        _answer(worker_answer("w", profile, f"# Task\nq{i}\n# Your instruction\ngo", META)[0]) == "42" for i in range(n)
    )
    assert abs(right / n - skill) < 0.04


def test_unsure_worker_takes_the_majority_it_sees() -> None:
    profile = SimWorkerProfile(skills={"math": 0.3})
    n, alone, helped = 1000, 0, 0
    for i in range(n):
        solo = f"# Task\nq{i}\n\n# Your instruction\naggregate"
        seen = _team(f"q{i}", ["42", "42", "7"], "aggregate")
        alone += _answer(worker_answer("w", profile, solo, META)[0]) == "42"
        helped += _answer(worker_answer("w", profile, seen, META)[0]) == "42"
    # right alone 30%; seeing a correct majority, 30% + 70% * 60% = 72%
    assert 0.25 < alone / n < 0.35 and 0.66 < helped / n < 0.78


def test_wrong_answers_come_from_choices_or_near_numbers() -> None:
    profile = SimWorkerProfile(default_skill=0.0)
    mc = {"domain": "science", "answer": "B", "choices": ["A", "B", "C", "D"]}
    for i in range(30):
        assert _answer(worker_answer("w", profile, f"q{i}", mc)[0]) in {"A", "C", "D"}
        assert _answer(worker_answer("w", profile, f"q{i}", META)[0]) != "42"


def test_difficulty_scales_tokens() -> None:
    profile = SimWorkerProfile(output_tokens=400)
    easy = sum(worker_answer("w", profile, f"q{i}", {**META, "difficulty": "easy"})[1] for i in range(50))
    hard = sum(worker_answer("w", profile, f"q{i}", {**META, "difficulty": "hard"})[1] for i in range(50))
    assert 3.0 < hard / easy < 5.0


def test_difficulty_moves_skill_unless_the_profile_keeps_it_exact() -> None:
    adjusted = SimWorkerProfile(skills={"math": 1.0}, default_skill=0.0)
    exact = adjusted.model_copy(update={"difficulty_adjusted": False})
    assert adjusted.skill_at("science", "easy") == 0.5 and adjusted.skill_at("math", "hard") == 0.75
    assert exact.skill_at("science", "easy") == 0.0 and exact.skill_at("math", "hard") == 1.0
    for i in range(30):  # an exact specialist: right in its domain at every difficulty, wrong elsewhere
        for difficulty in ("easy", "medium", "hard"):
            assert _answer(worker_answer("w", exact, f"q{i}", {**META, "difficulty": difficulty})[0]) == "42"
            science = {"domain": "science", "answer": "B", "choices": list("ABCD"), "difficulty": difficulty}
            assert _answer(worker_answer("w", exact, f"q{i}", science)[0]) != "B"


SYSTEM = (
    "## Workers\n- model_0: strongest at math\n- model_1: strongest at code\n- model_2: generalist\n\n"
    "## How\n- worker: x"
)


def test_conductor_writes_shapes_by_difficulty() -> None:
    profile = SimConductorProfile()
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Task:\nWhat is 2+2?"}]
    easy = json.loads(conductor_output("conductor", profile, msgs, {"domain": "code"}, 5))
    assert len(easy["steps"]) == 1 and easy["steps"][0]["worker"] == "model_1"
    shapes = set()
    for i in range(20):
        msgs[1]["content"] = f"Task:\nhard task {i}"
        wf = json.loads(conductor_output("conductor", profile, msgs, {"domain": "math", "difficulty": "hard"}, 5))
        shapes.add(len(wf["steps"]))
        assert all(s["worker"] in {"model_0", "model_1", "model_2"} for s in wf["steps"])
    assert shapes == {3, 4}  # planner/solver/verifier and fan-out of three plus an aggregator


def test_conductor_malformed_rate() -> None:
    """At rate 1 every workflow carries a fault the parser must repair or reject; at rate 0 none does."""

    def faulty(rate: float) -> int:
        profile = SimConductorProfile(malformed_rate=rate)
        count = 0
        for i in range(30):
            text = conductor_output(
                "c", profile, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task:\n{i}"}], {}, 5
            )
            try:
                parsed = parse_workflow(text)
                _, repairs = validate_workflow(parsed, ["model_0", "model_1", "model_2"], 5)
            except WorkflowError:
                count += 1
                continue
            count += bool(repairs) or parsed.form == "lists"
        return count

    assert faulty(1.0) == 30 and faulty(0.0) == 0


async def test_sim_goes_through_litellm_with_usage_and_cost() -> None:
    spec = ModelSpec(model="sim/anyone", price=Pricing(input_per_mtok=1.0, output_per_mtok=2.0))
    result = await Providers(Settings.from_env()).complete(
        spec, [{"role": "user", "content": "x" * 400}], metadata=META
    )
    assert result.prompt_tokens == 100 and result.completion_tokens > 0
    expected = (result.prompt_tokens * 1.0 + result.completion_tokens * 2.0) / 1e6
    assert result.cost_usd == pytest.approx(expected)
    assert result.answered_by == "sim/anyone" and result.attempts[0].ok


class _CallsSeen:
    """A litellm callback counting the calls litellm is asked to make (its deployment hook runs in every call,
    before the call returns)."""

    def __init__(self) -> None:
        from litellm.integrations.custom_logger import CustomLogger

        seen = self

        class Counter(CustomLogger):
            async def async_pre_call_deployment_hook(self, kwargs: dict[str, Any], call_type: Any) -> None:
                seen.calls += 1

        self.calls = 0
        self.logger = Counter()


async def test_sim_calls_take_the_direct_path_not_litellm() -> None:
    """litellm's per-call machinery cost more CPU than the simulator itself: the server's sim calls skip it."""
    import litellm

    from conductor_mcp.models import sim, sim_litellm

    seen = _CallsSeen()
    litellm.callbacks.append(seen.logger)
    try:
        sim_litellm.register()
        metadata = {sim.SIM_CALL: sim.SimCall(reference=META, time_scale=0)}
        await litellm.acompletion(model="sim/anyone", messages=[{"role": "user", "content": "x"}], metadata=metadata)
        assert seen.calls == 1  # the probe sees a call litellm makes
        providers = Providers(Settings.from_env(sim_time_scale=0))
        result = await providers.complete(ModelSpec(model="sim/anyone"), [{"role": "user", "content": "y"}])
        await providers.aclose()
    finally:
        litellm.callbacks.remove(seen.logger)
    assert seen.calls == 1 and result.attempts[0].ok and "ANSWER:" in result.text


@pytest.mark.parametrize("priced", [True, False])
@pytest.mark.parametrize("offered_tools", [True, False])
async def test_the_direct_path_answers_as_the_litellm_provider_did(priced: bool, offered_tools: bool) -> None:
    """Text, tool calls, finish reason, usage and cost: the same as through litellm's `sim` provider."""
    from conductor_mcp.models import sim, sim_litellm
    from conductor_mcp.models.backend import Call, request_for
    from conductor_mcp.models.litellm_backend import LitellmBackend
    from conductor_mcp.models.retry import Retrier
    from conductor_mcp.models.sim_backend import SimBackend

    price = Pricing(input_per_mtok=3.0, output_per_mtok=7.0) if priced else None
    spec = ModelSpec(model="sim/solver", price=price)
    task = prompts.worker_messages('Look it up with lookup {"q": 6} and answer.', None, _one_step(), 0, {})
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    extra = {"tools": tools if offered_tools else None}
    overrides = Settings.from_env(sim_time_scale=0)
    retrier = Retrier(0.0)
    litellm_backend = LitellmBackend(retrier)
    direct = await SimBackend(retrier, overrides).complete(spec, Call(task, "solver", [], META, None, extra))
    sim_litellm.register()
    request = request_for(spec, Call(task, "solver", [], META, None, extra))
    request["metadata"] = {sim.SIM_CALL: sim.SimCall(reference=META, time_scale=0)}
    through = await litellm_backend.send(spec, Call(task, "solver", [], META, None, extra), request, remote=False)
    assert direct.tool_calls == through.tool_calls and bool(direct.tool_calls) == offered_tools
    assert (direct.text, direct.finish_reason) == (through.text, through.finish_reason)
    assert (direct.prompt_tokens, direct.completion_tokens) == (through.prompt_tokens, through.completion_tokens)
    assert direct.cost_usd == pytest.approx(through.cost_usd) and (direct.cost_usd > 0) == priced


def _one_step() -> Workflow:
    return Workflow(steps=[Step(worker="solver", instruction="Use the tool the task names.")])


def test_task_set_is_reproducible_and_mixed() -> None:
    from conductor_mcp.learning.sim_tasks import task_set
    from conductor_mcp.models.sim import final_answer

    tasks = task_set(40, seed=3)
    assert tasks == task_set(40, seed=3) and tasks != task_set(40, seed=4)
    assert {t["domain"] for t in tasks} == {"math", "code", "science", "general"}
    assert [t["domain"] for t in task_set(4, seed=3, domains=["math", "code"])] == ["math", "code"] * 2
    assert {t["difficulty"] for t in tasks} == {"easy", "medium", "hard"}
    assert all(t["answer"] in t["choices"] for t in tasks if t["type"] == "multiple_choice")
    assert final_answer("x\nANSWER: 1\nmore\nANSWER: 7 ") == "7" and final_answer("none") == ""


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_simulator_reads_every_prompt_the_server_writes(style: str) -> None:
    """Prompt text and the simulator's readers live together in core/prompts: an edit cannot split them."""
    doc = sim_pool_doc(recursion=True)
    doc["conductor"]["prompt"] = style
    pool = parse_pool(doc, source="test", default_name="testpool")
    system = prompts.system_prompt(pool, 4)
    assert prompts.read_workers(system) == [
        ("model_0", "strongest at math"),
        ("model_1", "strongest at code"),
        ("model_2", "generalist"),
        ("conductor", prompts.CONDUCTOR_DESCRIPTION),
    ]
    assert prompts.read_step_limit(system) == 4
    workflow = Workflow(
        steps=[Step(worker="model_0", instruction="solve"), Step(worker="model_1", instruction="check", access=[0])]
    )
    message = prompts.worker_messages("the task", "ctx", workflow, 1, {0: "ANSWER: 7"})[0]["content"]
    shown, instruction = prompts.read_worker_prompt(message)
    assert instruction == "check" and "ANSWER: 7" in shown and "the task" in shown
    correction = prompts.correction_messages(pool, 4, "the task", None, [("solve", "ANSWER: 7")], "review")
    assert "ANSWER: 7" in (prompts.read_correction_work(correction[1]["content"]) or "")
    assert prompts.read_correction_work(prompts.conductor_messages(pool, 4, "the task", None)[1]["content"]) is None
    plan = json.loads(
        conductor_output("conductor", SimConductorProfile(), prompts.conductor_messages(pool, 4, "x", None), {}, 4)
    )
    assert plan["steps"] and all(s["worker"] in {"model_0", "model_1", "model_2", "conductor"} for s in plan["steps"])


async def test_a_pools_simulation_settings_stay_its_own(tmp_path: Path, pool_dir: Path) -> None:
    """Loading a pool with time_scale 0 must not make another pool's simulated workers instant."""
    instant = sim_pool_doc(name="instant")
    instant["simulation"]["time_scale"] = 0
    slow = sim_pool_doc(name="slow")
    slow["simulation"]["workers"] = {
        name: {"first_token_s": 0.3, "tokens_per_s": 1e9} for name in ("alpha", "beta", "gamma")
    }
    slow["simulation"]["conductors"] = {"conductor": {"first_token_s": 0.0, "tokens_per_s": 1e9}}
    write_pool(pool_dir, instant)
    write_pool(pool_dir, slow)
    settings = Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)
    async with Service.open(settings.model_copy(update={"sim_time_scale": None})) as service:  # pools' own scales
        service.pools.get("slow")  # loaded first, as a server that has served it before
        await orchestrate(service, "What is 2+2?", pool="instant")
        started = time.perf_counter()
        run = await orchestrate(service, "What is 2+2?", pool="slow", metadata={"difficulty": "easy"})
    assert run.status == "done" and time.perf_counter() - started >= 0.3
    assert run.steps[0].latency_s >= 0.3


# ------------------------------------------------------------------------------ the structured testbed's rules

TESTBED = {"domain": "math", "answer": "42", "difficulty": "medium", "pitfall": "units"}


def _team(task: str, answers: list[str], instruction: str) -> str:
    """A worker prompt showing earlier steps whose outputs state these answers, sealed as simulated outputs are."""
    earlier = [Step(worker="w", instruction="Solve it.") for _ in answers]
    workflow = Workflow(
        reasoning="r", steps=[*earlier, Step(worker="w", instruction=instruction, access=list(range(len(answers))))]
    )
    outputs = {j: f"Seal: {sim_testbed.seal(task, a)}\nANSWER: {a}" for j, a in enumerate(answers)}
    return prompts.worker_messages(task, None, workflow, len(answers), outputs)[0]["content"]


def _right(profile: SimWorkerProfile, prompt: str | Callable[[int], str], n: int = 1500) -> float:
    text = prompt if callable(prompt) else prompt.format
    return sum(_answer(worker_answer("w", profile, text(i=i), TESTBED)[0]) == "42" for i in range(n)) / n


def test_an_instruction_naming_the_pitfall_raises_the_skill() -> None:
    profile = SimWorkerProfile(skills={"math": 0.5}, focus_bonus=0.2)
    generic = _right(profile, "# Task\nq{i}\n\n# Your instruction\nSolve it.")
    focused = _right(profile, "# Task\nq{i}\n\n# Your instruction\nSolve it. Check the units.")
    assert abs(generic - 0.5) < 0.05 and abs(focused - 0.7) < 0.05


def test_a_reviewer_fixes_only_what_it_is_shown() -> None:
    profile = SimWorkerProfile(skills={"math": 0.1}, review_skill=0.9)

    def shown_right(i: int) -> str:
        return _team(f"q{i}", ["7", "42"], "Review.")

    def shown_wrong(i: int) -> str:
        return _team(f"q{i}", ["7", "7"], "Review.")

    # the right answer among those shown: kept 90% of the time (+10% * 10% solved alone); a wrong majority
    # shown: the reviewer can only solve alone (10%), it does not follow the majority either
    assert abs(_right(profile, shown_right) - 0.91) < 0.04 and abs(_right(profile, shown_wrong) - 0.1) < 0.03


def test_the_scripted_testbed_conductor_writes_the_rewarded_shapes() -> None:
    pool = parse_pool(
        {
            **sim_pool_doc(),
            "workers": [
                {"id": "m", "model": "sim/m", "description": "Strongest at math."},
                {"id": "c", "model": "sim/c", "description": "Strongest at code."},
                {"id": "r", "model": "sim/r", "description": "A cheap reviewer."},
            ],
        },
        source="test",
        default_name="testpool",
    )
    messages = prompts.conductor_messages(pool, 3, "Hard code task. Pitfall: sign.", None)
    profile = SimConductorProfile(style="testbed")
    hard = json.loads(
        conductor_output("c", profile, messages, {"domain": "code", "difficulty": "hard", "pitfall": "sign"}, 3)
    )
    easy = json.loads(
        conductor_output("c", profile, messages, {"domain": "math", "difficulty": "easy", "pitfall": "units"}, 3)
    )
    assert [(s["worker"], s["access"]) for s in hard["steps"]] == [
        ("model_1", []),
        ("model_1", []),
        ("model_2", [0, 1]),
    ]
    assert len({s["instruction"] for s in hard["steps"]}) == 3 and all(
        "sign" in s["instruction"] for s in hard["steps"]
    )
    assert [(s["worker"], s["instruction"]) for s in easy["steps"]] == [("model_0", "Solve it. Check the units.")]
