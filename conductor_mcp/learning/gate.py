"""The testbed gate (tools/gate_testbed.py): what a testbed must show before any LLM time is spent on it.

1. Conducting pays: the scripted conductor beats every input-independent completion by a margin. Under permuted
   ids a fixed completion (`model_0+ model_1 model_0`) names random workers, so its value depends only on its
   repetition pattern and flags: one representative per pattern is scored (50 for a 4-worker sub-pool).
2. It is learnable from the reward: a tiny feature policy (a softmax over the completions, scored by features such
   as "this worker's description names the task's domain" crossed with the difficulty and the step) trained with
   the group-relative advantage GRPO uses (Dr. GRPO: reward minus the group's mean, no scaling), on the rows an LLM
   run would see (steps x questions x group size rollouts), reaches most of the scripted conductor's reward.
3. Reading the task pays beyond reading the pool, learnably: per class of task (difficulty, which roles the
   sub-pool has), the role pattern best on the training tasks beats the one pattern best over all of them, on
   held-out tasks, and the feature policy takes at least half of that lead. Without that, a warm start taught to
   read the pool can already play the best pattern everywhere, and GRPO can only find which fixed pattern that is,
   as recipe 4 on version 2 did from both seeds (tools/results/grpo-cpu-sim-composed-v2).
The feature policy starts uniform over every completion, or (`--start roles`) where the LLM recipe's roles warm
start starts: GRPO moves a policy from its warm start, and what it can learn in a budget depends on where it begins.
With `--difficulty-salience` it reads the difficulty as an LLM conductor does (`features`): recipe 5's LLM learned
no per-difficulty shape where the plain feature policy did, and the handicapped one reproduces that.
If the feature policy cannot learn what a check asks, GRPO on an LLM cannot either: the testbed must change, not
the claim.

Every outcome comes from learning/sim_outcomes.py, the service's reward computed in-process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_mcp.config import builtin_pool_dir
from conductor_mcp.core.pool import Pool
from conductor_mcp.learning import (
    comparison,
    decisions,
    shape_probe,
    sim_outcomes,
    subpools,
    train_options,
    warm_start,
)
from conductor_mcp.learning.sim_tasks import COMPOSED_DIFFICULTIES, rules_of
from conductor_mcp.models import sim_testbed as testbed
from conductor_mcp.service.catalogue import load_pool

Job = tuple[dict[str, Any], Pool]  # a task and its sub-pool


def fixed_completions(k: int) -> list[str]:
    """One completion per repetition pattern and flags over a k-worker sub-pool: ids in order of first use."""
    found = []
    for n in range(1, decisions.MAX_DECISIONS + 1):
        for ids in itertools.product(range(k), repeat=n):
            if list(dict.fromkeys(ids)) != list(range(len(set(ids)))):
                continue
            for flags in itertools.product(("", "+"), repeat=n):
                found.append(" ".join(f"model_{i}{flag}" for i, flag in zip(ids, flags, strict=True)))
    return found


def all_completions(k: int) -> list[str]:
    """Every completion the decisions encoding can write over a k-worker sub-pool."""
    words = [f"model_{i}{flag}" for i in range(k) for flag in ("", "+")]
    return [" ".join(c) for n in range(1, decisions.MAX_DECISIONS + 1) for c in itertools.product(words, repeat=n)]


def role_of(description: str, domain: str) -> str:
    """What a worker is for this task, as its description says: S the domain's specialist, G the generalist,
    R the reviewer, O a specialist of another domain."""
    text = description.lower()
    if f"{testbed.SPECIALIST_MARK}{domain}" in text:
        return "S"
    if testbed.GENERALIST_MARK in text:
        return "G"
    return "R" if testbed.REVIEW_WORD in text else "O"


def features(
    completion: str, pool: Pool, task: dict[str, Any], salience: float | None = None
) -> list[tuple[str, float]]:
    """The features of one completion on one task, with their values: per step, the role of its worker and its
    flag, crossed with the number of steps and the task's difficulty (all a scripted conductor reads). With
    `salience`, each feature crossed with the difficulty is worth that much, and a copy blind to the difficulty is
    worth 1: an LLM's choice of shape is shared across its tasks, and the difficulty, one word of its prompt, moves
    it more slowly."""
    parsed = decisions.parse(completion, pool.visible_ids()) or []
    roles = {
        i: role_of(w.description, str(task["domain"])) for i, w in zip(pool.visible_ids(), pool.workers, strict=True)
    }
    weight = 1.0 if salience is None else salience
    shape = f"{len(parsed)} steps"
    found = [(f"{task['difficulty']}|{shape}", weight)]
    blind = [(shape, 1.0)]
    for step, (worker, told) in enumerate(parsed):
        role = roles[worker]
        cast = f"{shape}|step {step}|{role}"
        found += [(f"{task['difficulty']}|{cast}", weight), (f"step {step}|{role}", 1.0), (f"told {told}", 1.0)]
        blind.append((cast, 1.0))
    return found if salience is None else found + blind


Prior = Callable[[Pool, dict[str, Any]], dict[str, float]]  # a start's probability of each completion it favours
WARM_SPREAD = 0.1  # the share of a warm start's probability off the completions it was taught: an LLM tuned on them
# still samples others now and then


def roles_prior(pool: Pool, task: dict[str, Any]) -> dict[str, float]:
    """What the roles warm start (learning/warm_start.py's roles_rows) was taught to write on this task: the
    specialist and the reviewer as the descriptions name them, cast in one, two or three steps, each length
    equally likely, each `+` flag a coin toss."""
    cast = comparison.roles(pool, str(task["domain"]))
    taught: dict[str, float] = defaultdict(float)
    for length, roles in warm_start.CASTS.items():
        for flags in itertools.product(("", "+"), repeat=length):
            text = " ".join(f"{cast[role]}{flag}" for role, flag in zip(roles, flags, strict=True))
            taught[text] += 1 / len(warm_start.CASTS) / 2**length
    return taught


STARTS: dict[str, Prior | None] = {"uniform": None, "roles": roles_prior}
START_WORDS = {
    "uniform": "uniform over every completion",
    "roles": f"the roles warm start (its completions, {WARM_SPREAD:.0%} spread over the others)",
}


@dataclass
class FeaturePolicy:
    """A softmax over every completion, its logit the sum of its features' weights times their values, started
    from `prior` (a warm start's distribution, mixed with WARM_SPREAD of uniform) or from uniform: the policy GRPO
    starts from; with `salience`, one that reads the difficulty as an LLM does (`features`)."""

    k: int
    weights: dict[str, float] = field(default_factory=dict)
    prior: Prior | None = None
    salience: float | None = None
    beta: float = 0.0  # the LLM recipe's --beta: the KL term's weight, toward where the policy started

    def probabilities(
        self, pool: Pool, task: dict[str, Any]
    ) -> tuple[list[str], list[list[tuple[str, float]]], list[float]]:
        completions = all_completions(self.k)
        found = [features(c, pool, task, self.salience) for c in completions]
        logits = [sum(self.weights.get(f, 0.0) * value for f, value in fs) for fs in found]
        start = self._start_logits(completions, pool, task)
        return completions, found, _softmax([a + b for a, b in zip(logits, start, strict=True)])

    def _start_logits(self, completions: list[str], pool: Pool, task: dict[str, Any]) -> list[float]:
        """Where the policy started, as logits: its prior mixed with WARM_SPREAD of uniform, or uniform."""
        if self.prior is None:
            return [0.0] * len(completions)
        taught, spread = self.prior(pool, task), WARM_SPREAD / len(completions)
        return [math.log((1 - WARM_SPREAD) * taught.get(c, 0.0) + spread) for c in completions]

    def greedy(self, pool: Pool, task: dict[str, Any]) -> str:
        completions, _, probs = self.probabilities(pool, task)
        return completions[max(range(len(probs)), key=probs.__getitem__)]

    def update(self, pool: Pool, task: dict[str, Any], group: list[int], rewards: list[float], lr: float) -> None:
        """One group's step: the gradient of the group-relative advantage times the log-probability of each
        completion, (reward - group mean) x (its features - the policy's expected features). With `beta`, plus
        beta x (the starting policy's expected features - this one's): in expectation the gradient of TRL's KL
        estimate (k3, per token), which is that of KL(start || policy)."""
        _, found, probs = self.probabilities(pool, task)
        expected: defaultdict[str, float] = defaultdict(float)
        for fs, p in zip(found, probs, strict=True):
            for f, value in fs:
                expected[f] += p * value
        mean = statistics.fmean(rewards)
        step: defaultdict[str, float] = defaultdict(float)
        for index, reward in zip(group, rewards, strict=True):
            advantage = (reward - mean) / len(group)
            for f, value in found[index]:
                step[f] += advantage * value
            for f, p in expected.items():
                step[f] -= advantage * p
        if self.beta:
            start = _softmax(self._start_logits(all_completions(self.k), pool, task))
            for fs, p, q in zip(found, probs, start, strict=True):
                for f, value in fs:
                    step[f] += self.beta * (q - p) * value
        for f, change in step.items():
            self.weights[f] = self.weights.get(f, 0.0) + lr * change


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


Score = Callable[[str, dict[str, Any], Pool], float]


def scorer(recipe: argparse.Namespace, max_steps: int = 5, cost_scale_usd: float | None = None) -> Score:
    """The training reward of a completion (decisions or workflow JSON) on a task and sub-pool, kept per key; the
    cost term full at the sim set's cost scale, or at `cost_scale_usd` (the gate's what-if)."""
    scale = cost_scale_usd or rules_of(recipe.sim_set).cost_scale_usd
    kept: dict[tuple[str, tuple[str, ...], str], float] = {}

    def score(text: str, task: dict[str, Any], pool: Pool) -> float:
        key = (task["id"], subpools.worker_order(pool), text)
        if key not in kept:
            workflow = decisions.completion_workflow(text, pool, task) if not text.startswith("{") else text
            kept[key] = sim_outcomes.outcome(workflow, task, pool, max_steps, recipe.cost_weight, scale).reward
        return kept[key]

    return score


def train(
    jobs: list[Job],
    score: Score,
    k: int,
    group_size: int,
    lr: float,
    seed: int,
    every: int,
    check: list[Job],
    prior: Prior | None = None,
    salience: float | None = None,
    beta: float = 0.0,
) -> tuple[FeaturePolicy, list[tuple[int, float]]]:
    """GRPO-style training of the feature policy from `prior` (reading the difficulty at `salience`, held toward
    its start by `beta`) on these rows (one group each, in order); every `every` rows, its greedy mean reward on
    the `check` jobs: the learning curve as (rollouts, reward)."""
    policy, rng = FeaturePolicy(k, prior=prior, salience=salience, beta=beta), random.Random(seed)
    curve = []
    for row, (task, pool) in enumerate(jobs, start=1):
        completions, _, probs = policy.probabilities(pool, task)
        group = rng.choices(range(len(completions)), probs, k=group_size)
        rewards = [score(completions[i], task, pool) for i in group]
        policy.update(pool, task, group, rewards, lr)
        if row % every == 0 or row == len(jobs):
            curve.append((row * group_size, mean_reward(score, [policy.greedy(p, t) for t, p in check], check)))
    return policy, curve


def mean_reward(score: Score, texts: list[str], jobs: list[Job]) -> float:
    return statistics.fmean(score(text, task, pool) for text, (task, pool) in zip(texts, jobs, strict=True))


def shape_by_difficulty(policy: FeaturePolicy, jobs: list[Job]) -> dict[str, dict[str, float]]:
    """Per difficulty, the greedy completion's mean number of steps and the policy's probability of ending after
    the first decision as the scripted conductor casts it, given that decision: what learning/shape_probe.py reads
    of an LLM conductor, so the two can be compared."""
    found: defaultdict[str, list[tuple[int, float]]] = defaultdict(list)
    for task, pool in jobs:
        completions, _, probs = policy.probabilities(pool, task)
        first = shape_probe.first_decision(pool, task).strip()
        after_first = [(c, p) for c, p in zip(completions, probs, strict=True) if c.split()[0] == first]
        end = sum(p for c, p in after_first if c == first) / sum(p for _, p in after_first)
        greedy = completions[max(range(len(probs)), key=probs.__getitem__)]
        found[str(task["difficulty"])].append((len(greedy.split()), end))
    return {
        difficulty: {"steps": statistics.fmean(s for s, _ in rows), "end": statistics.fmean(e for _, e in rows)}
        for difficulty, rows in sorted(found.items(), key=lambda item: _difficulty_rank(item[0]))
    }


def _difficulty_rank(difficulty: str) -> tuple[int, str]:
    known = COMPOSED_DIFFICULTIES
    return (known.index(difficulty) if difficulty in known else len(known), difficulty)


def specialist_pick_rate(texts: list[str], jobs: list[Job]) -> float | None:
    """On the tasks whose sub-pool holds the domain's specialist, the share whose first solver is the specialist."""
    picks = []
    for text, (task, pool) in zip(texts, jobs, strict=True):
        specialist = subpools.specialist_of(pool, str(task["domain"]))
        parsed = decisions.parse(text, pool.visible_ids())
        if specialist is not None and parsed:
            picks.append(pool.resolve(parsed[0][0]).id == specialist)
    return statistics.fmean(picks) if picks else None


def shape_headroom(score: Score, train_jobs: list[Job], held_out: list[Job]) -> dict[str, Any]:
    """The class oracle (per class of task, the role pattern best on the training tasks; comparison.oracle_choice)
    and the one role pattern best over all training tasks, both played on the held-out tasks."""
    scored = {
        name: [{"reward": r} for r in role_pattern_rewards(score, train_jobs, name)] for name in comparison.PATTERNS
    }
    choice = comparison.oracle_choice(scored, [comparison.task_class(p, t) for t, p in train_jobs], "reward")
    return {
        "best_pattern": choice["*"],
        "best_pattern_held_out": statistics.fmean(role_pattern_rewards(score, held_out, choice["*"])),
        "class_oracle_held_out": statistics.fmean(role_pattern_rewards(score, held_out, choice)),
        "class_oracle_patterns": sorted(set(choice.values())),
    }


def role_pattern_rewards(score: Score, jobs: list[Job], play: str | dict[Any, str]) -> list[float]:
    """The reward of a role pattern on each job: one pattern everywhere, or an oracle's choice per class of task."""
    rewards = []
    for task, pool in jobs:
        name = play if isinstance(play, str) else comparison.oracle_play(play, pool, task)
        rewards.append(score(json.dumps(comparison.pattern(name)(pool, task)), task, pool))
    return rewards


MARGIN = 0.20  # the scripted conductor's least lead over the best fixed completion (mean reward)
SHARE = 0.90  # of the scripted conductor's held-out reward the feature policy must reach
# the class oracle's least lead over the best role pattern: the smallest gain 512 held-out tasks show at p < 0.01,
# with the paired reward's standard error 0.006-0.014 that #39's judgements measured
SHAPE_MARGIN = 0.03
SHAPE_SHARE = 0.5  # of that lead the feature policy must take: if it cannot learn the shape, GRPO cannot either


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Gate a testbed before training an LLM conductor on it.")
    parser.add_argument("--pool", default="sim-composed-v2")
    parser.add_argument("--sim-set", default="composed-v2")
    parser.add_argument("--tasks", type=int, default=512, help="training tasks and held-out tasks scored")
    parser.add_argument("--steps", type=int, default=60, help="the LLM run's GRPO steps")
    parser.add_argument("--questions", type=int, default=4, help="the LLM run's questions a step")
    parser.add_argument("--group-size", type=int, default=16, help="the LLM run's rollouts a question")
    parser.add_argument("--cost-weight", type=float, default=0.2)
    parser.add_argument(
        "--cost-scale-usd", type=float, help="the cost at which the cost term is full (default: the sim set's rule)"
    )
    parser.add_argument("--lr", type=float, default=2.0, help="the feature policy's learning rate")
    parser.add_argument(
        "--start",
        choices=sorted(STARTS),
        default="uniform",
        help="where the feature policy starts: uniform over every completion, or the LLM recipe's roles warm start",
    )
    parser.add_argument(
        "--difficulty-salience",
        type=float,
        help="read the difficulty as an LLM does: shape features shared across difficulties, and the ones crossed "
        "with the difficulty worth this much (0 < S <= 1; default: a policy with only the crossed ones)",
    )
    parser.add_argument("--beta", type=float, default=0.0, help="the LLM run's KL weight toward its start")
    parser.add_argument("--checks", type=int, default=8, help="points on the feature policy's learning curve")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    if args.difficulty_salience is not None and not 0 < args.difficulty_salience <= 1:
        parser.error(f"--difficulty-salience must be in (0, 1], not {args.difficulty_salience}")
    return args


def recipe(args: argparse.Namespace) -> argparse.Namespace:
    """The LLM run's options that decide its tasks, sub-pools and reward (tools/train_conductor.py's)."""
    return train_options.parse_args(
        [
            *("--base-model", "-", "--pool", args.pool, "--sim-set", args.sim_set, "--out", "-"),
            *("--sim-tasks", str(args.tasks), "--eval-tasks", str(args.tasks), "--seed", str(args.seed)),
            *("--steps", str(args.steps), "--questions", str(args.questions), "--group-size", str(args.group_size)),
            *("--subpool-k", "4", "--permute-ids", "--completion", "decisions", "--cost-weight", str(args.cost_weight)),
        ]
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The gate's numbers."""
    options = recipe(args)
    pool = load_pool(args.pool, [builtin_pool_dir()])
    tasks = train_options.training_tasks(options)
    training = subpools.training_pools(options, pool, 0)
    train_jobs = [(t, training[i]) for i, t in enumerate(tasks)]
    avoid = {subpools.worker_order(p) for p in training}
    held_out = [(t, subpools.held_out_pool(options, pool, t, avoid)) for t in train_options.held_out_tasks(options)]
    scale = args.cost_scale_usd or rules_of(args.sim_set).cost_scale_usd
    score = scorer(options, cost_scale_usd=scale)
    fixed = {c: mean_reward(score, [c] * len(train_jobs), train_jobs) for c in fixed_completions(4)}
    best = max(fixed, key=fixed.__getitem__)
    scripted = comparison.scripted(3, True)
    script = {
        name: [json.dumps(scripted(p, t)) for t, p in jobs]
        for name, jobs in (("train", train_jobs), ("held", held_out))
    }
    rows = options.steps * options.questions
    grpo_jobs = [(tasks[i % len(tasks)], training[i]) for i in range(rows)]
    every = max(1, rows // args.checks)
    start = STARTS[args.start]
    salience = args.difficulty_salience
    policy, curve = train(
        grpo_jobs, score, 4, args.group_size, args.lr, args.seed, every, held_out, start, salience, args.beta
    )
    greedy = [policy.greedy(p, t) for t, p in held_out]
    return {
        "pool": args.pool,
        "sim_set": args.sim_set,
        "tasks": len(tasks),
        "cost_weight": args.cost_weight,
        "cost_scale_usd": scale,
        "rollouts": rows * args.group_size,
        "start": args.start,
        "difficulty_salience": salience,
        "beta": args.beta,
        "fixed": dict(sorted(fixed.items(), key=lambda kv: -kv[1])),
        "best_fixed": best,
        "best_fixed_train": fixed[best],
        "best_fixed_held_out": mean_reward(score, [best] * len(held_out), held_out),
        "scripted_train": mean_reward(score, script["train"], train_jobs),
        "scripted_held_out": mean_reward(score, script["held"], held_out),
        "policy_held_out": curve[-1][1],
        "curve": curve,
        "policy_distinct": len(set(greedy)),
        "policy_specialist_pick": specialist_pick_rate(greedy, held_out),
        "policy_shape": shape_by_difficulty(policy, held_out),
        "weights": dict(sorted(policy.weights.items(), key=lambda kv: -abs(kv[1]))[:12]),
    } | shape_headroom(score, train_jobs, held_out)


def verdict(numbers: dict[str, Any]) -> tuple[bool, bool, bool]:
    """(conducting pays, the feature policy learns it, reading the task pays beyond reading the pool)."""
    pays = numbers["scripted_train"] - numbers["best_fixed_train"] >= MARGIN
    learns = numbers["policy_held_out"] >= SHARE * numbers["scripted_held_out"]
    lead, taken = shape_lead(numbers)
    return pays, learns, lead >= SHAPE_MARGIN and taken >= SHAPE_SHARE * lead


def shape_lead(numbers: dict[str, Any]) -> tuple[float, float]:
    """The class oracle's lead over the best role pattern on held-out tasks, and how much of it the feature policy
    took (its reward less the best role pattern's)."""
    best = numbers["best_pattern_held_out"]
    return numbers["class_oracle_held_out"] - best, numbers["policy_held_out"] - best


def handicap_words(salience: float | None, beta: float) -> str:
    """What the report says of the options that make the feature policy more like the LLM run."""
    words = ""
    if salience is not None:
        words += (
            f" It reads the difficulty as an LLM does, at salience {salience}: its shape features are shared across "
            f"difficulties, and their copies crossed with the difficulty are worth {salience}."
        )
    if beta:
        words += f" A KL term of weight {beta} holds it toward its start, as `--beta` does in the LLM run."
    return words


def markdown(numbers: dict[str, Any], command: str) -> str:
    pays, learns, shape = verdict(numbers)
    lead, taken = shape_lead(numbers)
    patterns = ", ".join(f"`{p}`" for p in numbers["class_oracle_patterns"])
    reached = next((r for r, v in numbers["curve"] if v >= SHARE * numbers["scripted_held_out"]), None)
    lines = [
        f"# Testbed gate: pool `{numbers['pool']}`, sim set `{numbers['sim_set']}`",
        "",
        f"`{command}`",
        "",
        f"{numbers['tasks']} training tasks (their training sub-pools) and {numbers['tasks']} held-out tasks (held-out "
        f"templates and sub-pools); mean reward at cost weight {numbers['cost_weight']} (full at "
        f"${numbers['cost_scale_usd']}). The feature policy trained on {numbers['rollouts']} rollouts, the number the "
        f"LLM run sees (steps x questions x group size), from {START_WORDS[numbers['start']]}."
        + handicap_words(numbers["difficulty_salience"], numbers["beta"]),
        "",
        "| strategy | training tasks | held-out tasks |",
        "|---|---|---|",
        f"| best fixed completion (`{numbers['best_fixed']}`, chosen on training tasks) | "
        f"{numbers['best_fixed_train']:.3f} | {numbers['best_fixed_held_out']:.3f} |",
        f"| scripted conductor | {numbers['scripted_train']:.3f} | {numbers['scripted_held_out']:.3f} |",
        f"| feature policy, greedy, after {numbers['rollouts']} rollouts | - | {numbers['policy_held_out']:.3f} |",
        f"| best role pattern on every task (`{numbers['best_pattern']}`, chosen on training tasks) | - | "
        f"{numbers['best_pattern_held_out']:.3f} |",
        f"| class oracle: per class of task the role pattern best on training tasks ({patterns}) | - | "
        f"{numbers['class_oracle_held_out']:.3f} |",
        "",
        f"- Conducting pays (scripted - best fixed >= {MARGIN} on training tasks): "
        f"{numbers['scripted_train'] - numbers['best_fixed_train']:+.3f}, {'PASS' if pays else 'FAIL'}.",
        f"- Learnable (feature policy >= {SHARE:.0%} of the scripted conductor on held-out tasks): "
        f"{numbers['policy_held_out'] / numbers['scripted_held_out']:.1%}, {'PASS' if learns else 'FAIL'}; "
        f"{f'first reached after {reached} rollouts' if reached else 'never reached'}.",
        f"- Reading the task pays beyond reading the pool, learnably (class oracle - best role pattern >= "
        f"{SHAPE_MARGIN} on held-out tasks, and the feature policy takes >= {SHAPE_SHARE:.0%} of that lead): lead "
        f"{lead:+.3f}, taken {taken:+.3f}, "
        f"{'PASS' if shape else 'FAIL'}.",
        f"- Feature policy's learning curve (rollouts, held-out greedy reward): {numbers['curve']}",
        f"- Its greedy completions: {numbers['policy_distinct']} distinct; specialist as first solver on "
        f"{numbers['policy_specialist_pick']:.1%} of held-out tasks whose sub-pool holds it.",
        "- Its shape per difficulty (greedy steps; P(end) after the scripted conductor's first decision, as "
        "tools/probe_shape.py reads an LLM conductor): "
        + ", ".join(f"{d} {v['steps']:.2f}, {v['end']:.2f}" for d, v in numbers["policy_shape"].items())
        + ".",
        f"- Its heaviest feature weights: { ({k: round(v, 2) for k, v in numbers['weights'].items()}) }",
        f"- The {len(numbers['fixed'])} fixed completions (one per repetition pattern and flags), best first: "
        f"{ ({k: round(v, 3) for k, v in list(numbers['fixed'].items())[:10]}) } ...",
    ]
    return "\n".join(lines) + "\n"
