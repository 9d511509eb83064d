"""The options of tools/train_conductor.py, and the training and held-out tasks they name (learning/training.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from conductor_mcp.learning import datasets, decisions
from conductor_mcp.learning.sim_tasks import COMPOSED_SETS, SET_DOMAINS, SIM_SETS, held_out_set


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a Conductor with GRPO (TRL) on the reward of its workflows.")
    parser.add_argument("--base-model", default="Qwen/Qwen2.5-7B-Instruct", help="HF id or local folder")
    _data_options(parser)
    _grpo_options(parser)
    _warm_start_options(parser)
    parser.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU; TRL's colocate mode)")
    parser.add_argument(
        "--unsafe-local-exec",
        action="store_true",
        help="where bubblewrap is missing, run code tasks' code unsandboxed (docs: Budgets, failures and security)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, required=True, help="the run's folder; the same command resumes a run there"
    )
    parser.add_argument(
        "--session-minutes",
        type=float,
        default=0,
        help="end this session, resumable, after the phase or GRPO step that crosses this many minutes (0: no end)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in GRPO's backward pass instead of keeping them: the same gradients in less "
        "memory, through TRL's own passes (a rollout's prompt computed for each rollout: the caches that share it "
        "are dropped under checkpointing); may differ between sessions",
    )
    args = parser.parse_args(argv)
    _check(parser, args)
    return args


def _data_options(parser: argparse.ArgumentParser) -> None:
    """The pool, the tasks and the held-out tasks."""
    parser.add_argument("--pool", default="sim", help="pool name or YAML path the conductor learns to use")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--dataset", action="append", help="JSONL task file(s) (datasets.py); repeatable")
    source.add_argument("--sim-tasks", type=int, help="generate this many simulator tasks instead")
    parser.add_argument("--sim-domains", help="domains of the simulator tasks (default: all of the set's)")
    parser.add_argument(
        "--sim-set",
        choices=sorted(SIM_SETS),
        default="plain",
        help="structured: the testbed's tasks (pool sim-structured); composed: 288 templates, "
        "held-out ones never trained on (pool sim-composed); composed-v2: the same tasks under the rules where "
        "conducting pays (pool sim-composed-v2: the specialist in 85%% of sub-pools, cost scale $0.04); "
        "composed-v3: the same tasks, their difficulty deciding the shape (pool sim-composed-v3, cost scale $0.012)",
    )
    parser.add_argument("--eval-tasks", type=int, default=0, help="with --sim-tasks: held-out tasks to score")
    parser.add_argument("--eval-dataset", action="append", help="held-out JSONL task file(s)")
    parser.add_argument("--subpool-k", type=int, default=0, help="random k-of-n workers per prompt (0: all)")
    parser.add_argument(
        "--permute-ids", action="store_true", help="with --subpool-k: each sub-pool's workers in random order"
    )


def _grpo_options(parser: argparse.ArgumentParser) -> None:
    """GRPO's schedule, sampling, loss and the policy's encoding."""
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--grpo-minutes",
        type=float,
        default=0,
        help="end GRPO after the step that crosses this many minutes (0: every step)",
    )
    parser.add_argument("--questions", type=int, default=4, help="questions per step")
    parser.add_argument("--group-size", type=int, default=64, help="rollouts per question (GRPO group)")
    parser.add_argument(
        "--grad-accum", type=int, default=1, help="score a step's rollouts in N slices: the same update, 1/N the memory"
    )
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument(
        "--beta", type=float, default=0.0, help="KL coefficient (paper: none); with --sft-steps, KL to the warm start"
    )
    parser.add_argument("--entropy-coef", type=float, default=0.0, help="entropy bonus: keeps small groups exploring")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-completion-length", type=int, default=1024)
    parser.add_argument("--max-steps-per-workflow", type=int, default=5)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--recursion-steps", type=int, default=0, help="final steps with the conductor in its pool")
    parser.add_argument("--cost-weight", type=float, default=0.0, help="0-0.5: reward cheaper right workflows")
    parser.add_argument(
        "--completion",
        choices=["workflow", "worker", *decisions.ENCODINGS],
        default="workflow",
        help="decisions: 1-3 worker ids with + flags into a skeleton (learning/decisions.py); assessed: the same "
        "after the policy's word for the task's difficulty",
    )
    parser.add_argument(
        "--scale-rewards",
        choices=["group", "batch", "none"],
        help="TRL's advantage scaling (default: TRL's); none is Dr. GRPO's",
    )
    parser.add_argument("--loss-type", help="TRL's loss type (default: TRL's); dr_grpo for Dr. GRPO")
    parser.add_argument(
        "--mask-truncated", action="store_true", help="leave completions cut at --max-completion-length out of the loss"
    )
    parser.add_argument("--shuffle", action="store_true", help="shuffle the training prompts")
    parser.add_argument(
        "--save-steps", type=int, default=1, help="checkpoint GRPO every N steps (a resume starts there)"
    )


def _warm_start_options(parser: argparse.ArgumentParser) -> None:
    """The supervised warm start and which held-out scores to take."""
    parser.add_argument(
        "--sft-steps", type=int, default=0, help="warm start: SFT steps on the sim conductor's workflows"
    )
    parser.add_argument(
        "--warm-start",
        choices=["scripted", "format", "specialist", "roles"],
        default="scripted",
        help="what --sft-steps imitates: the scripted conductor, random well-formed decisions "
        "(format only: random workers and shapes), those with the task's specialist as the first solver, or "
        "the scripted conductor's roles (specialist solves, reviewer reviews) in a random shape",
    )
    parser.add_argument("--sft-lr", type=float, default=2e-4)
    parser.add_argument("--sft-batch", type=int, default=8)
    parser.add_argument(
        "--sft-first-step-too",
        action="store_true",
        help="also imitate the first step alone of multi-step workflows (GRPO picks)",
    )
    parser.add_argument(
        "--skip-base-eval", action="store_true", help="do not score the untrained base model on the held-out tasks"
    )
    parser.add_argument("--eval-warm-start", action="store_true", help="also score the held-out tasks after SFT")
    parser.add_argument(
        "--eval-shuffled",
        action="store_true",
        help="also score the trained policy on the held-out tasks with the workers' descriptions shuffled among them "
        "(held_out_after_shuffled.jsonl: the judge's description-shuffle ablation)",
    )


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Option combinations that cannot work, as one clear error each."""
    if not args.dataset and not args.sim_tasks:
        parser.error("give --dataset or --sim-tasks")
    known = SET_DOMAINS[args.sim_set]
    args.sim_domains = args.sim_domains.split(",") if args.sim_domains else list(known)
    unknown = sorted(set(args.sim_domains) - set(known))
    if unknown:
        parser.error(f"--sim-domains: unknown {unknown}; the {args.sim_set} set's domains are {list(known)}")
    decision_targets = args.warm_start in ("format", "specialist", "roles")  # what they teach is written as decisions
    if decision_targets != (args.completion in decisions.ENCODINGS) and args.sft_steps:
        parser.error(
            "--completion decisions or assessed warms up with --warm-start format, specialist or roles "
            "(decisions), and only they do"
        )
    if args.completion == "assessed" and not (args.sim_tasks and args.sim_set in COMPOSED_SETS):
        parser.error(
            "--completion assessed has the policy write a composed task's difficulty: give --sim-tasks with "
            f"--sim-set {' or '.join(COMPOSED_SETS)}"
        )
    if args.permute_ids and not args.subpool_k:
        parser.error("--permute-ids permutes the sub-pools of --subpool-k: give it too")
    if args.grad_accum < 1 or (args.questions * args.group_size) % args.grad_accum:
        parser.error(f"--grad-accum must divide the step's {args.questions * args.group_size} rollouts")
    if args.eval_tasks and not args.sim_tasks:
        parser.error("--eval-tasks draws held-out simulated tasks; with --dataset give --eval-dataset instead")


def training_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.sim_tasks:
        return SIM_SETS[args.sim_set](args.sim_tasks, args.seed, args.sim_domains)
    return _load_all(args.dataset)


def held_out_tasks(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Tasks the policy never trains on: simulated ones from another seed, or --eval-dataset."""
    if args.eval_dataset:
        return _load_all(args.eval_dataset)
    if args.sim_tasks and args.eval_tasks:
        return held_out_set(args.sim_set, args.eval_tasks, args.seed, args.sim_domains)
    return []


def _load_all(paths: list[str]) -> list[dict[str, Any]]:
    return [task for path in paths for task in datasets.load(path)]
