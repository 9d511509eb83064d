"""The card of a trained conductor: card.json, README.md and the reward curve, written next to its adapter."""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from conductor_mcp.core.pool import Pool


def name_base_model_portably(adapter: Path, base_model: str) -> None:
    """PEFT writes the base model's path into the adapter's config as this machine spells it; a committed adapter
    names it as the card does, the home folder as ~ (committed results name no machine paths)."""
    config_path = adapter / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = _portable(base_model)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def plot_curve(curve: list[float], path: Path, sft_losses: list[float] | None = None) -> None:
    """The learning curve: GRPO's mean reward per step, beside the warm start's SFT loss when there was one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if sft_losses else 1, figsize=(11 if sft_losses else 7, 4), squeeze=False)
    if sft_losses:
        loss_ax = axes[0][0]
        loss_ax.plot(range(1, len(sft_losses) + 1), sft_losses, marker=".", color="tab:gray")
        loss_ax.set(xlabel="SFT step (warm start)", ylabel="loss", yscale="log", title="Warm start")
        loss_ax.grid(alpha=0.3)
    ax = axes[0][-1]
    ax.plot(range(1, len(curve) + 1), curve, marker=".", label="mean reward per step")
    window = max(1, len(curve) // 10)
    smooth = [
        sum(curve[max(0, i - window + 1) : i + 1]) / len(curve[max(0, i - window + 1) : i + 1])
        for i in range(len(curve))
    ]
    ax.plot(range(1, len(curve) + 1), smooth, label=f"moving mean ({window})")
    ax.set(xlabel="GRPO step", ylabel="reward", ylim=(-0.05, 1.05), title="GRPO")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_rollouts(rollouts: list[dict[str, Any]], path: Path) -> None:
    """What GRPO had to learn from, per reward call: the mean reward, its spread within groups (Dr. GRPO's
    advantages are these differences), the share of flat groups (no gradient) and distinct completions per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = range(1, len(rollouts) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, [r["mean"] for r in rollouts], marker=".", label="mean reward")
    left.plot(steps, [r["group_std"] for r in rollouts], marker=".", label="reward std within a group (mean)")
    left.plot(steps, [r["correct"] for r in rollouts], marker=".", label="right answers")
    left.set(xlabel="GRPO step", ylim=(-0.05, 1.05), title="Rewards")
    left.legend(fontsize=8)
    right.plot(steps, [r["flat_groups"] / r["groups"] for r in rollouts], marker=".", label="flat groups (share)")
    right.plot(steps, [r["distinct_per_group"] for r in rollouts], marker=".", label="distinct completions a group")
    right.set(xlabel="GRPO step", title="Exploration")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def warm_start_targets(args: argparse.Namespace) -> str:
    """What the warm start imitated, in words for the adapter's README."""
    targets = {
        "scripted": "the sim conductor's "
        + ("workflows and their first steps alone" if args.sft_first_step_too else "workflows"),
        "format": "random well-formed decisions (the format only)",
        "specialist": "random decisions with the task's specialist as the first solver",
        "roles": "the scripted conductor's roles (specialist solves, reviewer reviews) in random shapes",
    }[args.warm_start]
    return targets + (", each after the task's own difficulty" if args.completion == "assessed" else "")


def write_card(
    args: argparse.Namespace,
    pool: Pool,
    adapter: Path,
    curve: list[float],
    losses: list[float],
    evaluation: dict[str, Any],
    sft_losses: list[float],
    wall: dict[str, float],
    rollouts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The adapter's card (card.json, README.md) and reward curve, written next to it; returns the card."""
    card = {
        "base_model": _portable(args.base_model),
        "adapter": _portable(adapter),
        "pool": pool.name,
        "pool_digest": pool.digest(),
        "data": args.dataset or f"simulated x{args.sim_tasks} (seed {args.seed})",
        "steps": args.steps,
        "steps_done": len(losses),
        "recipe": recipe(args),
        "conductor_prompt": pool.conductor.prompt,
        "lora_r": args.lora_r,
        "reward_curve": curve,
        "losses": losses,
        "sft_steps": args.sft_steps,
        "sft_losses": sft_losses,
        "held_out": evaluation,
        "wall_s": {k: round(v, 1) for k, v in wall.items()},
        "rollouts": rollouts or [],
    }
    (args.out / "card.json").write_text(json.dumps(card, indent=2))
    plot_curve(curve, args.out / "reward_curve.png", sft_losses)
    if rollouts:
        plot_rollouts(rollouts, args.out / "rollouts.png")
    first, last = curve[: max(1, len(curve) // 5)], curve[-max(1, len(curve) // 5) :]
    warm = (
        f"a supervised warm start of {args.sft_steps} steps on {warm_start_targets(args)} (SFT loss "
        f"{sft_losses[0]:.3f} -> {sft_losses[-1]:.3f}), then "
        if sft_losses
        else ""
    )
    (args.out / "README.md").write_text(
        f"# Conductor adapter\n\nBase model `{card['base_model']}`, LoRA r={args.lora_r}, trained with {warm}GRPO for "
        f"{len(losses)} steps (of {args.steps}) on pool `{pool.name}` ({card['data']}).\n\nMean reward: first fifth "
        f"{sum(first) / len(first):.3f}, last fifth {sum(last) / len(last):.3f} (reward_curve.png).\n\n"
        f"{held_out_summary(evaluation)}"
        f"Serve it: `python tools/serve_conductor.py --model {card['base_model']} --lora conductor={card['adapter']}`, "
        "with "
        f"`prompt: {pool.conductor.prompt}` under the pool's `conductor:` (the prompt it was trained on).\n"
    )
    return card


def rollout_stats(
    completions: list[Any], tasks: list[dict[str, Any]], outcomes: list[Any], group: int
) -> dict[str, Any]:
    """One reward call's rollouts in numbers: the reward's spread within each group (no spread, no gradient),
    how many distinct completions each group wrote, and the most written ones."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    rewards = [o.reward for o in outcomes]
    groups = [range(start, start + group) for start in range(0, len(texts), group)]
    spreads = [statistics.pstdev([rewards[i] for i in g]) for g in groups]
    distinct = [len({texts[i].strip() for i in g}) for g in groups]
    common = Counter(t.strip()[:60] for t in texts).most_common(5)
    return {
        "mean": statistics.fmean(rewards),
        "group_std": statistics.fmean(spreads),
        "flat_groups": sum(s == 0 for s in spreads),
        "groups": len(groups),
        "distinct_per_group": statistics.fmean(distinct),
        "well_formed": statistics.fmean(o.well_formed for o in outcomes),
        "correct": statistics.fmean(o.correct for o in outcomes),
        "tasks": sorted({t["id"] for t in tasks}),
        "most_written": [[text, n] for text, n in common],
    }


def recipe(args: argparse.Namespace) -> dict[str, Any]:
    """A run's options as its card records them (paths portable)."""
    return {k: (_portable(v) if k in ("base_model", "out") else v) for k, v in vars(args).items()}


def held_out_summary(evaluation: dict[str, Any]) -> str:
    """Markdown lines comparing the greedy policy on held-out tasks before and after training."""
    if not evaluation:
        return ""
    lines = [f"Greedy workflows on {next(iter(evaluation.values()))['tasks']} held-out tasks:\n"]
    names = {"before": "untrained", "after_sft": "after the SFT warm start", "after": "after GRPO"}
    for when, name in names.items():
        if when not in evaluation:
            continue
        result = evaluation[when]
        domains = ", ".join(f"{d} {a:.2f}" for d, a in result["accuracy_by_domain"].items())
        lines.append(
            f"- {name}: mean reward {result['mean_reward']:.3f}, accuracy {result['accuracy']:.3f} "
            f"({domains}), well-formed {result['well_formed']:.2f}, steps/task "
            f"{result.get('steps_per_task', 1.0):.2f}\n"
        )
    return "".join(lines) + "\n"


def _portable(path: str | Path) -> str:
    """A path as a card may show it: the home folder as ~ (committed cards name no machine paths)."""
    text, home = str(path), str(Path.home())
    return "~" + text[len(home) :] if text.startswith(home + "/") else text


def summary(card: dict[str, Any]) -> str:
    """What a finished training run prints: the reward curve's ends and the held-out comparison."""
    curve = card["reward_curve"]
    fifth = max(1, len(curve) // 5)
    return (
        f"{len(curve)} steps; mean reward first fifth {sum(curve[:fifth]) / fifth:.3f}, "
        f"last fifth {sum(curve[-fifth:]) / fifth:.3f}; adapter in {card['adapter']}\n"
        + held_out_summary(card["held_out"])
    )
