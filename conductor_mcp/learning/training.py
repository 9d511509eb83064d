"""Train a Conductor with GRPO (TRL) from nothing but the reward of running its workflows.

Each prompt is the conductor prompt the server sends (the pool's full or compact prompt, then the task), for a random
k-of-n sub-pool seeded per prompt, as in the paper. Each completion is parsed by the server's parser, run on
that sub-pool by the server's executor and checked by a verifier (conductor_mcp/rewards.py). The last
--recursion-steps steps use pools that offer the conductor itself as a worker (the paper's recursion phase).
Output: a LoRA adapter, a card (card.json and README.md: base model, data, pool, recipe, reward curve) and
reward_curve.png; tools/serve_conductor.py serves the adapter on vLLM. tools/train_conductor.py is the command.

The defaults are the paper's recipe (a GPU job): Qwen2.5-7B-Instruct, 200 steps of 4 questions x 64 rollouts,
temperature 1.0, learning rate 1e-6, no KL term, completions of up to 1024 tokens:

    python tools/train_conductor.py --pool paper --dataset train.jsonl --use-vllm --out conductor-7b

A CPU run on the embedded model (convert it first with tools/convert_gguf.py):

    python tools/train_conductor.py --base-model ~/.cache/conductor-mcp/models/gemma3-270m-hf \\
        --pool sim-specialists --sim-tasks 64 --sim-domains math,code --steps 36 --questions 4 --group-size 8 \\
        --max-completion-length 4 --lr 1e-4 --entropy-coef 0.05 --lora-r 8 --lora-alpha 16 --completion worker \\
        --seed 1 --eval-tasks 32 --out conductor-cpu

(40 minutes on 2 cores; its card and curve are in tools/results/grpo-cpu-sim-specialists.)

`--completion worker` is a curriculum for models too small to write a whole workflow: the policy writes only
the worker id of a one-step workflow (the prompt ends in the workflow's JSON up to the id), so what it can
learn is which worker to pick for which task; the reward path is unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
from pathlib import Path
from typing import Any

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core import prompts
from conductor_mcp.core.pool import Pool
from conductor_mcp.errors import RequestError
from conductor_mcp.learning import datasets
from conductor_mcp.learning.code_checks import code_sandbox_problem
from conductor_mcp.learning.rewards import Outcome, WorkflowReward
from conductor_mcp.learning.sim_tasks import SIM_DOMAINS, task_set
from conductor_mcp.logs import configure_logging
from conductor_mcp.pools import load_pool
from conductor_mcp.service import Service

WORKER_PREFILL = '{"reasoning": "Route the task to one worker.", "steps": [{"worker": "'
WORKER_SUFFIX = '", "instruction": "Solve the task and state the final answer.", "access": []}]}'


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--base-model", default="Qwen/Qwen2.5-7B-Instruct", help="HF id or local folder")
    parser.add_argument("--pool", default="sim", help="pool name or YAML path the conductor learns to use")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--dataset", action="append", help="JSONL task file(s) (datasets.py); repeatable")
    source.add_argument("--sim-tasks", type=int, help="generate this many simulator tasks instead")
    parser.add_argument("--sim-domains", default=",".join(SIM_DOMAINS), help="domains of the simulator tasks")
    parser.add_argument("--eval-tasks", type=int, default=0, help="with --sim-tasks: held-out tasks to score")
    parser.add_argument("--eval-dataset", action="append", help="held-out JSONL task file(s)")
    parser.add_argument("--subpool-k", type=int, default=0, help="random k-of-n workers per prompt (0: all)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--questions", type=int, default=4, help="questions per step")
    parser.add_argument("--group-size", type=int, default=64, help="rollouts per question (GRPO group)")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (the paper uses none)")
    parser.add_argument("--entropy-coef", type=float, default=0.0, help="entropy bonus: keeps small groups exploring")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-completion-length", type=int, default=1024)
    parser.add_argument("--max-steps-per-workflow", type=int, default=5)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--recursion-steps", type=int, default=0, help="final steps with the conductor in its pool")
    parser.add_argument("--cost-weight", type=float, default=0.0, help="0-0.5: reward cheaper right workflows")
    parser.add_argument("--completion", choices=["workflow", "worker"], default="workflow")
    parser.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU; TRL's colocate mode)")
    parser.add_argument("--unsafe-local-exec", action="store_true",
                        help="where bubblewrap is missing, run code tasks' code unsandboxed (README)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not args.dataset and not args.sim_tasks:
        parser.error("give --dataset or --sim-tasks")
    args.sim_domains = args.sim_domains.split(",")
    unknown = sorted(set(args.sim_domains) - set(SIM_DOMAINS))
    if unknown:
        parser.error(f"--sim-domains: unknown {unknown}; the simulator's domains are {list(SIM_DOMAINS)}")
    if args.eval_tasks and not args.sim_tasks:
        parser.error("--eval-tasks draws held-out simulated tasks; with --dataset give --eval-dataset instead")
    return args


def training_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.sim_tasks:
        return task_set(args.sim_tasks, args.seed, args.sim_domains)
    return _load_all(args.dataset)


def held_out_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Tasks the policy never trains on: simulated ones from another seed, or --eval-dataset."""
    if args.eval_dataset:
        return _load_all(args.eval_dataset)
    if args.sim_tasks and args.eval_tasks:
        return task_set(args.eval_tasks, args.seed + 1, args.sim_domains)
    return []


def _load_all(paths: list[str]) -> list[dict[str, Any]]:
    return [task for path in paths for task in datasets.load(path)]


def build_rows(
    args: argparse.Namespace, pool: Pool, tokenizer: Any, tasks: list[dict[str, Any]], count: int, recursion_rows: int
) -> tuple[list[dict[str, Any]], dict[str, Pool]]:
    """One row per rollout group: the prompt text (chat template applied), the task and its sub-pool's name."""
    pools: dict[str, Pool] = {}
    rows = []
    for i in range(count):
        task = tasks[i % len(tasks)]
        sub = pool.sample(args.subpool_k, seed=args.seed * 100_003 + i) if args.subpool_k else pool
        if i >= count - recursion_rows:
            sub = sub.model_copy(update={"name": f"{sub.name}+recursion", "recursion": True})
        pools[sub.name] = sub
        messages = prompts.conductor_messages(sub, args.max_steps_per_workflow, task["question"], None)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        text = text.removeprefix(tokenizer.bos_token or "")  # the trainer's tokenizer adds BOS itself
        if args.completion == "worker":
            text += WORKER_PREFILL
        rows.append({"prompt": text, "task": json.dumps(task), "pool_name": sub.name})
    return rows, pools


def completion_text(args: argparse.Namespace, completion: Any) -> str:
    text = completion if isinstance(completion, str) else completion[0]["content"]
    if args.completion == "worker":  # the policy wrote the worker id: close the one-step workflow around it
        return WORKER_PREFILL + text.split('"', 1)[0].strip() + WORKER_SUFFIX
    return text


class Scorer:
    """Scores completions with the workflow reward on one event loop that lives as long as the process.

    TRL calls the reward during training and the held-out evaluation calls it around training; one loop keeps
    litellm's background workers and the per-loop endpoint limits valid for both.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        state_dir = Path(tempfile.mkdtemp(prefix="conductor-train-"))
        service = Service(Settings.from_env(state_dir=state_dir, sim_time_scale=0.0))  # rewards need no latency
        self.reward = WorkflowReward(service, args.max_steps_per_workflow, cost_weight=args.cost_weight,
                                     allow_unsafe_local_exec=args.unsafe_local_exec)  # fmt: skip
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="conductor-rewards", daemon=True).start()

    def __call__(self, completions: list[str], tasks: list[dict[str, Any]], pools: list[Pool]) -> list[Outcome]:
        batch = self.reward.score_batch(completions, tasks, pools)
        return asyncio.run_coroutine_threadsafe(batch, self.loop).result()


def evaluate_policy(
    args: argparse.Namespace, model: Any, tokenizer: Any, pool: Pool, tasks: list[dict[str, Any]], scorer: Scorer
) -> dict[str, Any]:
    """Score the policy's greedy workflow for each held-out task: what it learned, without sampling luck."""
    import torch

    rows, pools = build_rows(args, pool, tokenizer, tasks, len(tasks), 0)
    completions = []
    model.eval()
    for start in range(0, len(rows), 16):
        batch = tokenizer([r["prompt"] for r in rows[start : start + 16]], return_tensors="pt", padding=True,
                          padding_side="left").to(model.device)  # fmt: skip
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=args.max_completion_length, do_sample=False)
        completions += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train()
    outcomes = scorer([completion_text(args, c) for c in completions], tasks, [pools[r["pool_name"]] for r in rows])
    by_domain: dict[str, list[bool]] = {}
    for task, outcome in zip(tasks, outcomes, strict=True):
        by_domain.setdefault(task.get("domain") or "all", []).append(outcome.correct)
    return {
        "tasks": len(tasks),
        "mean_reward": sum(o.reward for o in outcomes) / len(outcomes),
        "well_formed": sum(o.well_formed for o in outcomes) / len(outcomes),
        "accuracy": sum(o.correct for o in outcomes) / len(outcomes),
        "accuracy_by_domain": {d: sum(v) / len(v) for d, v in sorted(by_domain.items())},
    }


def plot_curve(curve: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(curve) + 1), curve, marker=".", label="mean reward per step")
    window = max(1, len(curve) // 10)
    smooth = [
        sum(curve[max(0, i - window + 1) : i + 1]) / len(curve[max(0, i - window + 1) : i + 1])
        for i in range(len(curve))
    ]
    ax.plot(range(1, len(curve) + 1), smooth, label=f"moving mean ({window})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def score_only_completions_on_cpu() -> None:
    """Make TRL's fused LM head project only the completion tokens on a CPU, as it does on Triton devices.

    Elsewhere TRL scores every position (static shapes for compilers such as Neuron's), which on a CPU pushes each
    prompt token through Gemma's 262k-token vocabulary: about 70% of a step. Compact scoring gives the same
    log-probabilities (the padded positions are masked out either way); the kernel itself keeps its torch path.
    """
    from trl.trainer import utils as trl_utils

    use_triton = getattr(trl_utils, "_use_triton", None)
    if use_triton is None:  # a TRL without the fused head: nothing to change
        return
    trl_utils._use_triton = lambda device: device.type == "cpu" or use_triton(device)


def train(args: argparse.Namespace) -> dict[str, Any]:
    tasks, held_out = training_tasks(args), held_out_tasks(args)
    problem = code_sandbox_problem(tasks + held_out, args.unsafe_local_exec)
    if problem:  # before anything is loaded, not after the first batch of rollouts
        raise RequestError(problem)
    from datasets import Dataset  # pyright: ignore[reportAttributeAccessIssue]  (Hugging Face's, not ours)
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    configure_logging("error")
    score_only_completions_on_cpu()
    pool = load_pool(args.pool, [builtin_pool_dir()])
    tokenizer = AutoTokenizer.from_pretrained(args.base_model)
    rows, pools = build_rows(args, pool, tokenizer, tasks, args.steps * args.questions,
                             args.recursion_steps * args.questions)  # fmt: skip
    scorer = Scorer(args)
    curve: list[float] = []

    def workflow_reward(prompts: list[Any], completions: list[Any], task: list[str], pool_name: list[str],
                        **_: Any) -> list[float]:  # fmt: skip
        """TRL reward function: run each completion's workflow and score its answer."""
        outcomes = scorer(
            [completion_text(args, c) for c in completions],
            [json.loads(t) for t in task],
            [pools[n] for n in pool_name],
        )
        scores = [o.reward for o in outcomes]
        curve.append(sum(scores) / len(scores))
        return scores

    config = GRPOConfig(
        output_dir=str(args.out / "trainer"), max_steps=args.steps, learning_rate=args.lr, beta=args.beta,
        temperature=args.temperature, entropy_coef=args.entropy_coef, num_generations=args.group_size,
        per_device_train_batch_size=args.questions * args.group_size, max_completion_length=args.max_completion_length,
        logging_steps=1, save_strategy="no", report_to="none", seed=args.seed, use_vllm=args.use_vllm,
        vllm_mode="colocate", shuffle_dataset=False, use_cpu=not args.use_vllm and not _has_gpu(),
        bf16=False, disable_tqdm=True,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=args.base_model, reward_funcs=[workflow_reward], args=config, train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, peft_config=LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha,
                                                           target_modules="all-linear", task_type="CAUSAL_LM"),
    )  # fmt: skip
    evaluation = {"before": evaluate_policy(args, trainer.model, tokenizer, pool, held_out, scorer)} if held_out else {}
    trainer.train()
    if held_out:
        evaluation["after"] = evaluate_policy(args, trainer.model, tokenizer, pool, held_out, scorer)
    adapter = args.out / "adapter"
    trainer.save_model(str(adapter))
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return write_card(args, pool, adapter, curve, losses, evaluation)


def write_card(
    args: argparse.Namespace,
    pool: Pool,
    adapter: Path,
    curve: list[float],
    losses: list[float],
    evaluation: dict[str, Any],
) -> dict[str, Any]:
    """The adapter's card (card.json, README.md) and reward curve, written next to it; returns the card."""
    card = {
        "base_model": args.base_model, "adapter": str(adapter), "pool": pool.name, "pool_digest": pool.digest(),
        "data": args.dataset or f"simulated x{args.sim_tasks} (seed {args.seed})", "steps": args.steps,
        "recipe": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "conductor_prompt": pool.conductor.prompt, "lora_r": args.lora_r, "reward_curve": curve, "losses": losses,
        "held_out": evaluation,
    }  # fmt: skip
    (args.out / "card.json").write_text(json.dumps(card, indent=2))
    plot_curve(curve, args.out / "reward_curve.png")
    first, last = curve[: max(1, len(curve) // 5)], curve[-max(1, len(curve) // 5) :]
    (args.out / "README.md").write_text(
        f"# Conductor adapter\n\nBase model `{args.base_model}`, LoRA r={args.lora_r}, trained with GRPO for "
        f"{args.steps} steps on pool `{pool.name}` ({card['data']}).\n\nMean reward: first fifth "
        f"{sum(first) / len(first):.3f}, last fifth {sum(last) / len(last):.3f} (reward_curve.png).\n\n"
        f"{held_out_summary(evaluation)}"
        f"Serve it: `python tools/serve_conductor.py --model {args.base_model} --lora conductor={adapter}`, with "
        f"`prompt: {pool.conductor.prompt}` under the pool's `conductor:` (the prompt it was trained on).\n"
    )  # fmt: skip
    return card


def held_out_summary(evaluation: dict[str, Any]) -> str:
    """Markdown lines comparing the greedy policy on held-out tasks before and after training."""
    if not evaluation:
        return ""
    lines = [f"Greedy workflows on {evaluation['before']['tasks']} held-out tasks:\n"]
    for when in ("before", "after"):
        result = evaluation[when]
        domains = ", ".join(f"{d} {a:.2f}" for d, a in result["accuracy_by_domain"].items())
        lines.append(f"- {when} training: mean reward {result['mean_reward']:.3f}, accuracy {result['accuracy']:.3f} "
                     f"({domains}), well-formed {result['well_formed']:.2f}\n")  # fmt: skip
    return "".join(lines) + "\n"


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def summary(card: dict[str, Any]) -> str:
    """What a finished training run prints: the reward curve's ends and the held-out comparison."""
    curve = card["reward_curve"]
    fifth = max(1, len(curve) // 5)
    return (
        f"{len(curve)} steps; mean reward first fifth {sum(curve[:fifth]) / fifth:.3f}, "
        f"last fifth {sum(curve[-fifth:]) / fifth:.3f}; adapter in {card['adapter']}\n"
        + held_out_summary(card["held_out"])
    )
