"""GRPO smoke test: two steps of the embedded Gemma 3 270M (converted to a Hugging Face folder) with LoRA.

Needs the `train` extra; CI runs it in its own cached environment (.ci/run), elsewhere it is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("trl")
from safetensors.torch import load_file

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core import prompts
from conductor_mcp.learning import decisions, judge, recipe, rejudge, resume, shape_probe, subpools, train_options
from conductor_mcp.learning import training as train_conductor
from conductor_mcp.learning.sim_tasks import structured_task_set
from conductor_mcp.models import convert_gguf
from conductor_mcp.service.catalogue import load_pool

pytestmark = [pytest.mark.slow, pytest.mark.external]
RECIPE = Path(__file__).parents[2] / "tools" / "paper_recipe.py"


def test_two_grpo_steps_change_the_adapter(tmp_path: Path) -> None:
    model = convert_gguf.convert()
    args = train_options.parse_args(
        [
            "--base-model",
            str(model),
            "--pool",
            "sim-specialists",
            "--sim-tasks",
            "8",
            "--steps",
            "2",
            "--questions",
            "2",
            "--group-size",
            "4",
            "--max-completion-length",
            "8",
            "--lr",
            "1e-3",
            "--lora-r",
            "8",
            "--completion",
            "worker",
            "--seed",
            "3",
            "--eval-tasks",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    card = train_conductor.train(args)
    assert len(card["losses"]) == 2 and all(math.isfinite(loss) for loss in card["losses"])
    assert len(card["reward_curve"]) == 2 and all(0.0 <= r <= 1.0 for r in card["reward_curve"])
    weights = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    assert lora_b and any(float(t.abs().sum()) > 0 for t in lora_b)  # LoRA B starts at zero: training moved it
    assert (tmp_path / "reward_curve.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "card.json").exists()
    for when in ("before", "after"):  # the greedy policy on held-out tasks, scored through the same reward
        held_out = card["held_out"][when]
        assert held_out["tasks"] == 4 and set(held_out["accuracy_by_domain"]) == {"math", "code", "science", "general"}
        assert 0.0 <= held_out["mean_reward"] <= 1.0
    assert "held-out tasks" in (tmp_path / "README.md").read_text()


def test_cpu_scoring_of_completion_tokens_only_gives_the_same_log_probs(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer import utils as trl_utils

    model = AutoModelForCausalLM.from_pretrained(convert_gguf.convert())
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    input_ids = torch.randint(100, 5000, (2, 12), generator=torch.Generator().manual_seed(0))
    labels = input_ids.clone()
    labels[:, :8] = -100  # the prompt: only the last four tokens are a completion

    def scored() -> tuple[torch.Tensor, torch.Tensor]:
        out = model(input_ids=input_ids, labels=labels, fused_lm_head=True)
        return out.log_probs, out.entropy

    every_position = scored()
    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)  # restored after the test
    train_conductor.score_only_completions_on_cpu()
    assert trl_utils._use_triton(torch.device("cpu"))  # the fused head now takes its compact path on a CPU
    completions_only = scored()
    for full, compact in zip(every_position, completions_only, strict=True):
        assert torch.allclose(full, compact, atol=1e-5) and bool(full[:, -3:].abs().sum() > 0)


def test_sft_warm_start_then_a_full_workflow_grpo_step(tmp_path: Path) -> None:
    """The whole-conductor path: SFT on the scripted testbed conductor's workflows, then GRPO on JSON workflows
    with a cost term, continuing the same adapter; the held-out files feed tools/evaluate.py --workflows."""
    model = convert_gguf.convert()
    args = train_options.parse_args(
        [
            "--base-model",
            str(model),
            "--pool",
            "sim-structured",
            "--sim-set",
            "structured",
            "--sim-tasks",
            "4",
            "--eval-tasks",
            "2",
            "--sft-steps",
            "2",
            "--sft-batch",
            "2",
            "--sft-lr",
            "1e-3",
            "--eval-warm-start",
            "--sft-first-step-too",
            "--steps",
            "1",
            "--questions",
            "2",
            "--group-size",
            "2",
            "--grad-accum",
            "2",
            "--max-completion-length",
            "16",
            "--lr",
            "1e-4",
            "--cost-weight",
            "0.2",
            "--max-steps-per-workflow",
            "3",
            "--lora-r",
            "4",
            "--lora-alpha",
            "8",
            "--seed",
            "2",
            "--beta",
            "0.04",
            "--out",
            str(tmp_path),
        ]
    )
    card = train_conductor.train(args)
    assert len(card["sft_losses"]) == 2 and all(math.isfinite(loss) for loss in card["sft_losses"])
    assert len(card["losses"]) == 1 and len(card["reward_curve"]) == 1
    assert set(card["held_out"]) == {"before", "after_sft", "after"} and set(card["wall_s"]) >= {"sft", "grpo"}
    for label in ("before", "after_sft", "after"):
        rows = [json.loads(line) for line in (tmp_path / f"held_out_{label}.jsonl").read_text().splitlines()]
        assert [r["task_id"] for r in rows] == ["held-out-tb-3-0", "held-out-tb-3-1"] and all(
            r["prompt_tokens"] > 100 for r in rows
        )
    sft = load_file(tmp_path / "sft-adapter" / "adapter_model.safetensors")
    final = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert set(sft) == set(final)  # GRPO continued the warm start's adapter rather than starting a new one
    assert not (tmp_path / "adapter" / "ref").exists()  # the KL term's reference copy is not saved with it
    assert any(float(t.abs().sum()) > 0 for name, t in sft.items() if "lora_B" in name)
    assert (
        "warm start of 2 steps on the sim conductor's workflows and their first steps alone"
        in (tmp_path / "README.md").read_text()
    )
    check_the_shape_probe(tmp_path, args)


def check_the_shape_probe(run_dir: Path, args: argparse.Namespace) -> None:
    """The probe reports both adapters of a run over its held-out tasks, and its teacher-forced probability of a
    continuation equals the one generate() scores for it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = shape_probe.probe(run_dir)
    assert set(report) == {"warm start", "trained"}
    for rows in report.values():
        assert sum(s["tasks"] for s in rows.values()) == args.eval_tasks
        assert all(
            s["another_step"] > 0 and s["end"] > 0 and s["another_step"] + s["end"] <= 1 + 1e-6 for s in rows.values()
        )
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(args.base_model), str(run_dir / "adapter"))
    pool = load_pool("sim-structured", [builtin_pool_dir()])
    task = train_options.held_out_tasks(args)[0]
    messages = prompts.conductor_messages(pool, 3, task["question"], None)
    context = train_conductor.prompt_text(tokenizer, messages) + shape_probe.first_step_prefix(pool, task, 3)
    with torch.no_grad():
        out = model.generate(
            **tokenizer(context, return_tensors="pt"),
            max_new_tokens=1,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
        )
    token = int(out.sequences[0, -1])
    scored = float(torch.softmax(out.scores[0][0].float(), dim=-1)[token])
    [probed] = shape_probe.continuation_probabilities(model, tokenizer, context, [tokenizer.decode([token])])
    assert probed == pytest.approx(scored, rel=1e-3)


def test_grad_accum_slices_a_step_without_changing_it(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--base-model", "m", "--sim-tasks", "8", "--questions", "4", "--group-size", "8", "--out", "o"]
    config = train_conductor.grpo_config(train_options.parse_args([*base, "--grad-accum", "4"]), use_cpu=True)
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (8, 4)
    assert (config.generation_batch_size, config.steps_per_generation) == (32, 4)  # one generation per update
    with pytest.raises(SystemExit):
        train_options.parse_args([*base, "--grad-accum", "3"])
    assert "--grad-accum must divide the step's 32 rollouts" in capsys.readouterr().err


@pytest.mark.parametrize("add_bos_token", [False, True])
def test_training_prompts_tokenize_to_the_ids_a_server_sends(add_bos_token: bool) -> None:
    """vLLM renders the chat template with its BOS; the trainers tokenize the prompt text themselves and must get
    the same ids whether or not the tokenizer adds a BOS of its own (the converted embedded one does not)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf.convert(), add_bos_token=add_bos_token)
    assert (tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id) is add_bos_token
    pool = load_pool("sim-structured", [builtin_pool_dir()])
    messages = prompts.conductor_messages(pool, 3, structured_task_set(1, seed=5)[0]["question"], None)
    served = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True)
    trained = tokenizer(train_conductor.prompt_text(tokenizer, messages))["input_ids"]
    bos = tokenizer.bos_token_id
    assert trained == served["input_ids"] and trained[0] == bos and trained.count(bos) == 1


def recipe_dry_run(*extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(RECIPE), "--dataset", "bundled:smoke", "--out", "conductor-7b", "--dry-run", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_the_paper_recipe_dry_run_checks_everything_but_the_gpu() -> None:
    """tools/paper_recipe.py --dry-run: the paper's hyperparameters, TRL accepting them with vLLM generation, the
    data, the pool's keys and endpoints, the disk; a missing piece is named and the exit status is 2."""
    missing = [name for name in recipe.PACKAGES if importlib.util.find_spec(name) is None]
    done = recipe_dry_run("--set", "pool=sim", "--set", f"base-model={convert_gguf.convert()}")
    assert done.returncode == (2 if missing else 0), done.stderr
    assert "200 steps x 4 questions x 64 rollouts" in done.stdout and "lr 1e-06" in done.stdout
    assert "--use-vllm" in done.stdout
    problems = [line for line in done.stderr.splitlines() if line.startswith("paper_recipe: problem:")]
    assert [p.split()[3].rstrip(":") for p in problems] == missing  # nothing but what this environment lacks
    paper = recipe_dry_run()  # the paper's own pool: its API keys and worker servers are not here
    assert paper.returncode == 2 and "OPENAI_API_KEY is not set" in paper.stderr
    assert recipe_dry_run("--set", "learning-rate=1").returncode == 2  # argparse: not one of the recipe's values


def test_the_dr_grpo_regime_reaches_grpo_config() -> None:
    """Each option of the learning regime is a field TRL's GRPOConfig has, set to what the command line says."""
    args = train_options.parse_args(
        [
            "--base-model",
            "m",
            "--sim-tasks",
            "8",
            "--sim-set",
            "composed",
            "--questions",
            "1",
            "--group-size",
            "16",
            "--scale-rewards",
            "none",
            "--loss-type",
            "dr_grpo",
            "--mask-truncated",
            "--shuffle",
            "--temperature",
            "1.2",
            "--beta",
            "0",
            "--out",
            "o",
        ]
    )
    config = train_conductor.grpo_config(args, use_cpu=True)
    assert (config.scale_rewards, config.loss_type, config.mask_truncated_completions) == ("none", "dr_grpo", True)
    assert (config.shuffle_dataset, config.temperature, config.beta, config.num_generations) == (True, 1.2, 0.0, 16)
    plain = train_conductor.grpo_config(
        train_options.parse_args(["--base-model", "m", "--sim-tasks", "8", "--out", "o"]), use_cpu=True
    )
    assert (plain.loss_type, plain.shuffle_dataset, plain.mask_truncated_completions) == ("dapo", False, False)


def test_a_format_warm_start_then_a_decisions_grpo_step(tmp_path: Path) -> None:
    """The decisions regime end to end: random well-formed decisions as the warm start, one Dr. GRPO step on
    permuted 4-of-8 sub-pools of the composed testbed, held-out tasks on sub-pools no training row drew."""
    args = small_decisions_run(
        tmp_path,
        "sim-composed",
        "composed",
        *("--eval-warm-start", "--steps", "1", "--scale-rewards", "none", "--loss-type", "dr_grpo"),
        *("--mask-truncated", "--shuffle", "--temperature", "1.2", "--cost-weight", "0.2"),
    )
    card = train_conductor.train(args)
    assert len(card["losses"]) == 1 and len(card["rollouts"]) == 1 and card["rollouts"][0]["groups"] == 1
    assert "warm start of 2 steps on random well-formed decisions" in (tmp_path / "README.md").read_text()
    trained_orders = {
        subpools.worker_order(p)
        for p in subpools.training_pools(args, load_pool("sim-composed", [builtin_pool_dir()]), 4)
    }
    for label in ("before", "after_sft", "after"):
        rows = [json.loads(line) for line in (tmp_path / f"held_out_{label}.jsonl").read_text().splitlines()]
        assert [r["task_id"] for r in rows] == ["held-out-2-0", "held-out-2-1", "held-out-2-2"]
        assert all(len(r["pool_workers"]) == 4 and tuple(r["pool_workers"]) not in trained_orders for r in rows)
        assert all(r["completion_tokens"] <= 16 for r in rows)
    check_the_decisions_probe(tmp_path, args)


def test_an_assessed_roles_warm_start_then_a_grpo_step(tmp_path: Path) -> None:
    """The assessed encoding end to end on the composed testbed v3: prompts that end in `Difficulty:`, the roles warm
    start copying each task's difficulty, a Dr. GRPO step whose rollouts run as workflows, and the probe's context
    written the same way."""
    args = small_decisions_run(
        tmp_path,
        "sim-composed-v3",
        "composed-v3",
        *("--completion", "assessed", "--warm-start", "roles", "--max-completion-length", "20"),
        *("--skip-base-eval", "--eval-warm-start", "--steps", "1", "--scale-rewards", "none", "--loss-type", "dr_grpo"),
    )
    card = train_conductor.train(args)
    assert len(card["losses"]) == 1 and card["rollouts"][0]["groups"] == 1
    readme = (tmp_path / "README.md").read_text()
    assert (
        "roles (specialist solves, reviewer reviews) in random shapes, each after the task's own difficulty" in readme
    )
    for label in ("after_sft", "after"):
        rows = [json.loads(line) for line in (tmp_path / f"held_out_{label}.jsonl").read_text().splitlines()]
        assert len(rows) == 3 and all(r["completion_tokens"] <= 20 for r in rows)
        offered = [f"model_{i}" for i in range(4)]
        for r in rows:  # a written assessment and decisions run as their workflow; anything else stays as written
            assert (decisions.parse(r["written"], offered, assessed=True) is None) == (r["completion"] == r["written"])
    check_the_decisions_probe(tmp_path, args)


def check_the_decisions_probe(run_dir: Path, args: argparse.Namespace) -> None:
    """On a decisions run the probe reports both adapters over the held-out tasks, and its P(another decision) and
    P(end) are the model's next-token probabilities of ` model` and EOS after the first decision."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = shape_probe.probe(run_dir)
    assert set(report) == {"warm start", "trained"}
    assert all(sum(s["tasks"] for s in rows.values()) == args.eval_tasks for rows in report.values())
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(args.base_model), str(run_dir / "adapter"))
    tasks = train_options.held_out_tasks(args)
    pool = load_pool(args.pool, [builtin_pool_dir()])
    rows, pools = train_conductor.build_rows(args, pool, tokenizer, tasks, len(tasks), 0, held_out=True)
    assessed = args.completion == "assessed"
    assert rows[0]["prompt"].endswith(decisions.prefill(assessed))
    context = rows[0]["prompt"] + shape_probe.first_decision(pools[rows[0]["pool_name"]], tasks[0], assessed)
    with torch.no_grad():
        logits = model(**tokenizer(context, return_tensors="pt")).logits[0, -1]
    next_token = torch.softmax(logits.float(), dim=-1)
    [another] = tokenizer(shape_probe.ANOTHER_DECISION, add_special_tokens=False)["input_ids"]
    continuations = [shape_probe.ANOTHER_DECISION, tokenizer.eos_token]
    probed = shape_probe.continuation_probabilities(model, tokenizer, context, continuations)
    expected = [float(next_token[another]), float(next_token[tokenizer.eos_token_id])]
    assert probed == pytest.approx(expected, rel=1e-3)


def test_a_step_with_each_prompt_computed_once_trains_the_adapter_trls_own_passes_train(tmp_path: Path) -> None:
    """Without --gradient-checkpointing a group's prompt is computed once (learning/shared_prefix.py); with it TRL's
    own passes run, every rollout with its whole prompt and its activations recomputed. The same run both ways
    samples the same rollouts and trains the same adapter, which the step moved. Adam's first step divides each
    gradient by its own size, so the few components near Adam's epsilon may differ by a fraction of the learning
    rate; a component pushed the other way would differ by twice the learning rate (2e-3)."""
    import torch

    adapters = {}
    for name, extra in (("shared", ()), ("trl", ("--gradient-checkpointing",))):
        (tmp_path / name).mkdir()
        options = ("--skip-base-eval", "--steps", "1", "--lr", "1e-3", *extra)
        args = small_decisions_run(tmp_path / name, "sim-composed-v2", "composed-v2", *options)
        assert train_conductor.grpo_config(args, use_cpu=True).gradient_checkpointing is bool(extra)
        train_conductor.train(args)
        adapters[name] = load_file(tmp_path / name / "adapter" / "adapter_model.safetensors")
    rollouts = {name: (tmp_path / name / "rewards.jsonl").read_text() for name in adapters}
    assert rollouts["shared"] == rollouts["trl"]
    warm = load_file(tmp_path / "shared" / "sft-adapter" / "adapter_model.safetensors")
    shared, trl = adapters["shared"], adapters["trl"]
    assert shared.keys() == trl.keys() == warm.keys()
    assert all(not shared[k].equal(warm[k]) for k in shared)  # GRPO's step moved every LoRA matrix
    assert all(shared[k].allclose(trl[k], rtol=1e-4, atol=2e-4) for k in shared)
    moved = [torch.cat([(adapter[k] - warm[k]).flatten() for k in warm]) for adapter in (shared, trl)]
    assert float(torch.nn.functional.cosine_similarity(*moved, dim=0)) > 0.999


def small_decisions_run(out: Path, pool: str, sim_set: str, *options: str) -> argparse.Namespace:
    """A decisions run on a composed testbed small enough for a test: a format warm start of 2 steps, 4 training
    tasks on permuted 4-worker sub-pools, one question of 4 rollouts a step, 3 held-out tasks."""
    return train_options.parse_args(
        [
            *("--base-model", str(convert_gguf.convert()), "--pool", pool, "--sim-set", sim_set),
            *("--sim-tasks", "4", "--eval-tasks", "3", "--completion", "decisions", "--warm-start", "format"),
            *("--sft-steps", "2", "--sft-batch", "2", "--sft-lr", "1e-3", "--questions", "1", "--group-size", "4"),
            *("--max-completion-length", "16", "--subpool-k", "4", "--permute-ids", "--lora-r", "4"),
            *("--lora-alpha", "8", "--seed", "2", "--out", str(out), *options),
        ]
    )


def resumable_run(out: Path, *session: str) -> argparse.Namespace:
    """A small decisions run on the composed testbed v2 with the trained policy's description-shuffle evaluation."""
    return small_decisions_run(
        out,
        "sim-composed-v2",
        "composed-v2",
        "--skip-base-eval",
        "--eval-shuffled",
        "--steps",
        "2",
        "--lr",
        "5e-5",
        *session,
    )


def test_a_run_whose_session_ended_resumes_with_the_same_command(tmp_path: Path) -> None:
    """Sessions that end (here after every phase or step: a session of no minutes) lose nothing and redo nothing:
    the warm start is trained once, GRPO continues from its step-1 checkpoint, and the run ends with its 2 steps."""
    with pytest.raises(resume.SessionEnded, match="after sft"):
        train_conductor.train(resumable_run(tmp_path, "--session-minutes", "1e-9"))
    sft = tmp_path / "sft-adapter" / "adapter_model.safetensors"
    sft_written = (sft.stat().st_mtime_ns, sft.read_bytes())
    assert not (tmp_path / "trainer").exists()
    with pytest.raises(resume.SessionEnded, match="after GRPO step 1 of 2"):
        train_conductor.train(resumable_run(tmp_path, "--session-minutes", "1e-9"))
    step_1 = tmp_path / "trainer" / "checkpoint-1" / "trainer_state.json"
    step_1_written = step_1.stat().st_mtime_ns
    assert len((tmp_path / "rewards.jsonl").read_text().splitlines()) == 1
    card = train_conductor.train(resumable_run(tmp_path))  # the same command, in a session without an end
    assert (sft.stat().st_mtime_ns, sft.read_bytes()) == sft_written  # the warm start was not trained again
    assert step_1.stat().st_mtime_ns == step_1_written  # GRPO resumed after step 1 rather than starting over
    assert json.loads((tmp_path / "trainer" / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2
    assert len(card["losses"]) == 2 and len(card["reward_curve"]) == 2 and len(card["rollouts"]) == 2
    assert len(card["sft_losses"]) == 2 and set(card["held_out"]) == {"after", "after_shuffled"}
    assert set(card["wall_s"]) == {"sft", "grpo", "eval_after", "eval_after_shuffled"}  # GRPO's over both sessions
    rows = {
        label: [json.loads(line) for line in (tmp_path / f"held_out_{label}.jsonl").read_text().splitlines()]
        for label in ("after", "after_shuffled")
    }
    plain, shuffled = rows["after"], rows["after_shuffled"]  # what the judge pairs: same tasks, same sub-pools
    assert [r["task_id"] for r in shuffled] == [r["task_id"] for r in plain] == [f"held-out-2-{i}" for i in range(3)]
    assert [r["pool_workers"] for r in shuffled] == [r["pool_workers"] for r in plain]
    again = train_conductor.train(resumable_run(tmp_path))  # a finished run: its card, nothing run again
    assert again["losses"] == card["losses"] and again["held_out"] == card["held_out"]


def test_the_shuffled_evaluation_reads_each_sub_pool_with_its_descriptions_shuffled(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    args = resumable_run(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    pool = load_pool("sim-composed-v2", [builtin_pool_dir()])
    tasks = train_options.held_out_tasks(args)
    subs, plain = train_conductor.evaluation_prompts(args, tokenizer, pool, tasks, shuffled=False)
    same_subs, shuffled = train_conductor.evaluation_prompts(args, tokenizer, pool, tasks, shuffled=True)
    assert same_subs == subs  # the workflows run on the real sub-pools
    for sub, task, read, real in zip(subs, tasks, shuffled, plain, strict=True):
        misled = subpools.shuffled_descriptions(sub, task["id"])
        assert read == train_conductor.policy_prompt(args, tokenizer, misled, task) != real
        assert real == train_conductor.policy_prompt(args, tokenizer, sub, task)
        assert all(w.description in read for w in sub.workers)  # the same descriptions, other workers


def test_a_committed_run_is_re_judged_on_another_pool_file(tmp_path: Path) -> None:
    """tools/judge_learning.py --pool: on the run's own pool the adapters write the run's own held-out files; on a
    pool with other worker ids and descriptions they write for sub-pools of that pool, which the judge scores
    beside the baselines; the run's folder is left as it was."""
    run = tmp_path / "run"
    run.mkdir()
    train_conductor.train(resumable_run(run, "--eval-warm-start"))
    before = {f: f.read_bytes() for f in run.rglob("*") if f.is_file()}
    own = tmp_path / "own"
    judged = [*("--run", str(run), "--oracle-tasks", "8")]
    rejudge.rejudge(judge.parse_args([*judged, "--pool", "sim-composed-v2", "--out", str(own)]))
    for label in ("after", "after_sft", "after_shuffled"):
        assert (own / f"held_out_{label}.jsonl").read_text() == (run / f"held_out_{label}.jsonl").read_text()

    other = yaml.safe_load((builtin_pool_dir() / "sim-composed-v2.yaml").read_text())
    for worker in other["workers"]:  # other names, other words around the same skills
        worker["id"] = f"{worker['id']}-b"
        worker["description"] = f"A model trained at length. {worker['description']} Priced per token."
    other["default_worker"] = "generalist-b"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    report = rejudge.rejudge(
        judge.parse_args([*judged, "--pool", str(tmp_path / "other.yaml"), "--out", str(tmp_path / "other")])
    )
    trained_orders = {
        subpools.worker_order(p)
        for p in subpools.training_pools(resumable_run(run), load_pool(str(tmp_path / "other.yaml"), []), 0)
    }
    for label in ("after", "after_sft", "after_shuffled"):
        rows = [json.loads(line) for line in (tmp_path / "other" / f"held_out_{label}.jsonl").read_text().splitlines()]
        assert [r["task_id"] for r in rows] == [f"held-out-2-{i}" for i in range(3)]
        assert all(w.endswith("-b") for r in rows for w in r["pool_workers"])
        assert not {tuple(r["pool_workers"]) for r in rows} & trained_orders
    strategies = report["strategies"]
    assert {"trained", "warm start", "trained (descriptions shuffled)", "scripted conductor"} <= set(strategies)
    assert all(m["tasks"] == 3 for m in strategies.values())
    assert json.loads((tmp_path / "other" / "recipe.json").read_text())["pool"] == str(tmp_path / "other.yaml")
    assert "| trained |" in (tmp_path / "other" / "judged.md").read_text()
    assert {f: f.read_bytes() for f in run.rglob("*") if f.is_file()} == before


def padded_prompts(lengths: list[int], repeats: int) -> tuple[Any, Any]:
    """Random prompts of these lengths, each repeated `repeats` times and left-padded as TRL pads them."""
    import torch

    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(100, 5000, (n,), generator=generator) for n in lengths]
    width = max(lengths)
    ids = torch.stack([torch.cat([p.new_zeros(width - p.size(0)), p]) for p in prompts for _ in range(repeats)])
    mask = torch.stack([torch.cat([p.new_zeros(width - p.size(0)), p.new_ones(p.size(0))]) for p in prompts])
    return ids, mask.repeat_interleave(repeats, dim=0)


def test_log_probs_and_gradients_with_each_prompt_computed_once_are_trls() -> None:
    """Two groups whose prompts differ in length (so one is padded) and completions that end early: the shared-prefix
    pass gives TRL's per-token log-probabilities, entropies and LoRA gradients (TRL's way: every row whole)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from conductor_mcp.learning import shared_prefix

    base = AutoModelForCausalLM.from_pretrained(convert_gguf.convert())
    add_fused_lm_head(base, temperature=1.2, outputs=("log_probs", "entropy"))
    lora = LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM", init_lora_weights=False)
    model = get_peft_model(base, lora)
    prompt_ids, prompt_mask = padded_prompts([30, 23], repeats=3)
    generator = torch.Generator().manual_seed(2)
    completion_ids = torch.randint(100, 5000, (6, 8), generator=generator)
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[::3, 5:] = 0  # these rollouts wrote EOS at their sixth token
    advantages = torch.randn(6, 1, generator=generator)

    def trl_way() -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, : prompt_ids.size(1)] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -8:], out.entropy[:, -8:]

    def shared() -> tuple[torch.Tensor, torch.Tensor]:
        return shared_prefix.completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask)

    results = []
    for way in (trl_way, shared):
        model.zero_grad()
        logps, entropy = way()
        (-(logps * advantages).sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        results.append((logps.detach(), entropy.detach(), grads))
    (trl_logps, trl_entropy, trl_grads), (logps, entropy, grads) = results
    assert bool((logps[::3, 5:] == 0).all()) and bool((logps[:, :5] < 0).all())  # masked tokens are not scored
    assert torch.allclose(logps, trl_logps, atol=2e-3) and torch.allclose(entropy, trl_entropy, atol=2e-3)
    assert all(bool(g.abs().sum() > 0) for g in grads)  # LoRA A and B in every layer got a gradient
    for grad, trl_grad in zip(grads, trl_grads, strict=True):
        assert torch.allclose(grad, trl_grad, rtol=1e-3, atol=1e-3 * float(trl_grad.abs().max()))


def test_generation_with_each_prompt_prefilled_once_writes_what_generate_writes() -> None:
    """Greedy decoding of grouped, left-padded prompts: the same rows, tokens and padding as one plain generate call,
    and the model's own generate is back after the block."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from conductor_mcp.learning import shared_prefix

    path = convert_gguf.convert()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    texts = ["The capital of France is", "Count: one, two,", "The capital of France is", "Count: one, two,"]
    batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    config = GenerationConfig(
        max_new_tokens=6,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        disable_compile=True,
    )
    with torch.no_grad():
        plain = model.generate(**batch, generation_config=config)
        with shared_prefix.shared_prefix_generation(model):
            shared = model.generate(**batch, generation_config=config)
    assert torch.equal(shared, plain) and "generate" not in vars(model)
    assert shared_prefix.prompt_groups(batch["input_ids"], batch["attention_mask"])[1][1] == [1, 3]


def test_the_grpo_step_benchmark_prints_both_ways_and_their_agreement() -> None:
    """tools/bench_grpo_step.py at a tiny size: both passes' ratios, and how far apart the two ways' log-probs are."""
    bench = Path(__file__).parents[2] / "tools" / "bench_grpo_step.py"
    tiny = ("--questions", "2", "--group-size", "2", "--prompt-tokens", "20", "--completion-tokens", "3")
    done = subprocess.run(
        [sys.executable, str(bench), *tiny, "--repeats", "1"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "2 prompts of ~20 tokens x 2 rollouts of 3 tokens (4 rows)" in done.stdout
    assert [line.split(":")[0].strip() for line in done.stdout.splitlines() if "ratio" in line] == [
        "generate",
        "logps",
        "both",
    ]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("largest log-probability difference") and float(last.rsplit(": ", 1)[1]) < 1e-3
