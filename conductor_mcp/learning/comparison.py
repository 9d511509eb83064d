"""Judge a training run by what learning means: the trained policy against its own warm start, paired, on the
held-out tasks and the sub-pools it was evaluated on, beside the baselines and the oracles on the same tasks.

Every strategy is a workflow per (task, sub-pool), scored by the training reward itself (rewards.py: run on the
pool by the server's executor, checked by the verifier, cost at the training cost weight), so accuracy, reward
and tokens are counted the same way for all. The baselines are at their strongest: the router and the scripted
conductor (the testbed's own, models/sim_testbed.py) and Mixture-of-Agents, each with and without the task's
stated pitfall named. The oracles know the rules: per class of task (difficulty, and whether the sub-pool has the
domain's specialist, the generalist, the reviewer) they play the role pattern with the best mean reward (or
accuracy) on training tasks; the hindsight ceiling takes, per task, the best of those patterns' outcomes.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from conductor_mcp.core.pool import Pool
from conductor_mcp.learning.strategies import AGGREGATE, SOLVE, mcnemar_exact
from conductor_mcp.models import sim_testbed as testbed

Workflow = dict[str, Any]
Build = Callable[[Pool, dict[str, Any]], Workflow]
PATTERNS = ("S", "G", "S R", "S S R", "S G R", "G G R", "S S S")  # roles: specialist, generalist, reviewer


def workers_of(pool: Pool) -> list[tuple[str, str]]:
    return [(i, w.description) for i, w in zip(pool.visible_ids(), pool.workers, strict=True)]


def scripted(max_steps: int, name_pitfall: bool) -> Build:
    """The testbed's scripted conductor (max_steps 1: the router), naming the pitfall or not."""
    return lambda pool, task: testbed.scripted_workflow(workers_of(pool), task, max_steps, name_pitfall)


def moa(name_pitfall: bool) -> Build:
    """Mixture-of-Agents on the sub-pool: every worker proposes, the default worker aggregates them all."""

    def build(pool: Pool, task: dict[str, Any]) -> Workflow:
        told = f" {testbed.PITFALL_MARK}{task.get('pitfall') or 'answer'}." if name_pitfall else ""
        ids = pool.visible_ids()
        steps = [{"worker": i, "instruction": SOLVE + told, "access": []} for i in ids]
        final = {"worker": pool.default_visible_id(), "instruction": AGGREGATE + told, "access": list(range(len(ids)))}
        return {"reasoning": "mixture of agents", "steps": [*steps, final]}

    return build


def roles(pool: Pool, domain: str) -> dict[str, str]:
    """Who plays each role in this sub-pool: S the domain's specialist (else the generalist), G the generalist
    (else S), R the reviewer (else S)."""
    workers = workers_of(pool)
    specialist = testbed.best_for(workers, domain)
    generalist = next((w for w, d in workers if testbed.GENERALIST_MARK in d.lower()), specialist)
    reviewer = next((w for w, d in workers if testbed.REVIEW_WORD in d.lower()), specialist)
    return {"S": specialist, "G": generalist, "R": reviewer}


def pattern(name: str) -> Build:
    """A role pattern as a workflow in the decisions encoding's shapes, every step told the pitfall."""

    def build(pool: Pool, task: dict[str, Any]) -> Workflow:
        cast = roles(pool, str(task.get("domain")))
        pitfall = str(task.get("pitfall") or "answer")
        shape = testbed.SHAPES[len(name.split())]
        steps = [
            {"worker": cast[role], "instruction": testbed.instruction(step_role, pitfall), "access": access}
            for role, (step_role, access) in zip(name.split(), shape, strict=True)
        ]
        return {"reasoning": f"pattern {name}", "steps": steps}

    return build


def task_class(pool: Pool, task: dict[str, Any]) -> tuple[str, bool, bool, bool]:
    """What an oracle conditions on: the difficulty, and which roles the sub-pool really has."""
    text = [w.description.lower() for w in pool.workers]
    return (
        str(task.get("difficulty")),
        any(f"{testbed.SPECIALIST_MARK}{task.get('domain')}" in d for d in text),
        any(testbed.GENERALIST_MARK in d for d in text),
        any(testbed.REVIEW_WORD in d for d in text),
    )


def oracle_choice(scored: dict[str, list[dict[str, Any]]], classes: list[Any], key: str) -> dict[Any, str]:
    """Per class, the pattern with the best mean `key` ("reward" or "correct") over the rows of that class; under
    "*" the best over all rows, for a class the training tasks never showed."""
    best: dict[Any, str] = {}
    for cls in [*set(classes), "*"]:
        rows = {
            name: [r[key] for r, c in zip(rs, classes, strict=True) if cls in (c, "*")] for name, rs in scored.items()
        }
        best[cls] = max(PATTERNS, key=lambda name: (statistics.fmean(rows[name]), -PATTERNS.index(name)))
    return best


def oracle_play(choice: dict[Any, str], pool: Pool, task: dict[str, Any]) -> str:
    """The pattern an oracle plays on this task."""
    return choice.get(task_class(pool, task), choice["*"])


def paired_reward(mine: list[float], theirs: list[float]) -> dict[str, float]:
    """Paired test on per-task reward: the mean difference, its standard error and the two-sided p-values of the
    paired t statistic, by the normal approximation (`p_value`, what judgements before #39 reported) and by
    Student's t distribution with n - 1 degrees of freedom (`t_p_value`, the exact paired t-test)."""
    diffs = [a - b for a, b in zip(mine, theirs, strict=True)]
    mean = statistics.fmean(diffs)
    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    se = spread / math.sqrt(len(diffs)) if diffs else 0.0
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
        return {"mean_diff": mean, "se": 0.0, "p_value": p, "t_p_value": p}
    t = abs(mean / se)
    return {
        "mean_diff": mean,
        "se": se,
        "p_value": math.erfc(t / math.sqrt(2)),
        "t_p_value": student_t_p(t, len(diffs) - 1),
    }


def student_t_p(t: float, df: int) -> float:
    """Two-sided p-value of Student's t with df degrees of freedom: the regularised incomplete beta function
    I_x(df/2, 1/2) at x = df / (df + t^2)."""
    return _incomplete_beta(df / 2, 0.5, df / (df + t * t))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz), on the side where it converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    c, d = 1.0, _nonzero(1.0 - (a + b) * x / (a + 1))
    fraction = d = 1.0 / d
    for m in range(1, 400):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for step in (even, odd):
            d = 1.0 / _nonzero(1.0 + step * d)
            c = _nonzero(1.0 + step / c)
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction / a


def _nonzero(value: float) -> float:
    return value if abs(value) > 1e-300 else 1e-300


def paired_correct(mine: list[bool], theirs: list[bool]) -> dict[str, Any]:
    wins = sum(a and not b for a, b in zip(mine, theirs, strict=True))
    losses = sum(b and not a for a, b in zip(mine, theirs, strict=True))
    return {"wins": wins, "losses": losses, "p_value": mcnemar_exact(wins, losses)}


def specialist_first(pool: Pool, task: dict[str, Any], workflow: Workflow | None) -> bool | None:
    """Whether the workflow's first step goes to the task's specialist; None where the sub-pool holds none (or the
    workflow names no worker of it)."""
    specialist = next(
        (w.id for w in pool.workers if f"{testbed.SPECIALIST_MARK}{task.get('domain')}" in w.description.lower()), None
    )
    steps = (workflow or {}).get("steps") or []
    if specialist is None or not steps or steps[0].get("worker") not in pool.visible_ids():
        return None
    return pool.resolve(steps[0]["worker"]).id == specialist


def summary(rows: list[dict[str, Any]], moa_tokens: float | None) -> dict[str, Any]:
    n = len(rows)
    tokens = statistics.fmean(r["tokens"] for r in rows)
    picks = [r["specialist_first"] for r in rows if r.get("specialist_first") is not None]
    return {
        "tasks": n,
        "accuracy": statistics.fmean(r["correct"] for r in rows),
        "mean_reward": statistics.fmean(r["reward"] for r in rows),
        "well_formed": statistics.fmean(r["well_formed"] for r in rows),
        "tokens_per_task": tokens,
        "usd_per_task": statistics.fmean(r["cost_usd"] for r in rows),
        "steps_per_task": statistics.fmean(r["steps"] for r in rows),
        "tokens_vs_moa": tokens / moa_tokens if moa_tokens else None,
        "distinct": len({r.get("decisions") for r in rows}),
        "specialist_pick": statistics.fmean(picks) if picks else None,
    }


def novel_workflows(signatures: dict[str, list[str]], policy: str, others: tuple[str, ...]) -> dict[str, Any]:
    """The workflows (as decisions over real worker ids) the policy writes that none of `others` writes on the
    same task, counted by shape: what it found that the fixed strategies do not do."""
    novel = [
        sig
        for i, sig in enumerate(signatures[policy])
        if all(signatures[o][i] != sig for o in others if o in signatures)
    ]
    shapes = Counter(" ".join("+" if w.endswith("+") else "-" for w in sig.split()) or "none" for sig in novel)
    return {
        "tasks": len(novel),
        "share": len(novel) / max(1, len(signatures[policy])),
        "by_shape": dict(shapes.most_common()),
        "examples": [s for s, _ in Counter(novel).most_common(8)],
    }


SHAPE_READERS = ("trained", "warm start", "trained (descriptions shuffled)", "scripted conductor")


def steps_by_difficulty(by: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Steps per task by the task's difficulty, for the policies and the scripted conductor: whether a policy's
    shape follows the task (the scripted conductor's does: one step on easy tasks, three on the others)."""
    difficulties = sorted({str(r.get("difficulty")) for rs in by.values() for r in rs}, key=_difficulty_order)
    return {
        name: {d: statistics.fmean(r["steps"] for r in by[name] if str(r.get("difficulty")) == d) for d in difficulties}
        for name in SHAPE_READERS
        if name in by
    }


def _difficulty_order(difficulty: str) -> tuple[int, str]:
    known = ("easy", "medium", "hard", "expert")
    return (known.index(difficulty) if difficulty in known else len(known), difficulty)


def report(rows: list[dict[str, Any]], oracle: dict[str, Any], cost_weight: float) -> dict[str, Any]:
    """The judgement: every strategy's summary, the hindsight ceiling, the paired tests of the trained policy and
    of its warm start against the others, and the workflows only the trained policy writes."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["strategy"], []).append(r)
    patterns = [by[f"pattern {name}"] for name in PATTERNS]
    by["hindsight ceiling"] = [
        {**max(per_task, key=lambda r: (r["reward"], r["correct"])), "strategy": "hindsight ceiling"}
        for per_task in zip(*patterns, strict=True)
    ]
    moa_tokens = statistics.fmean(r["tokens"] for r in by["moa"]) if "moa" in by else None
    summaries = {name: summary(rs, moa_tokens) for name, rs in by.items()}
    tests = {}
    for policy in ("trained", "warm start"):
        if policy not in by:
            continue
        for other in by:
            if other != policy and not (policy == "warm start" and other == "trained"):
                tests[f"{policy} vs {other}"] = {
                    "correct": paired_correct([r["correct"] for r in by[policy]], [r["correct"] for r in by[other]]),
                    "reward": paired_reward([r["reward"] for r in by[policy]], [r["reward"] for r in by[other]]),
                }
    signatures = {name: [r["signature"] for r in rs] for name, rs in by.items()}
    novel = {
        p: novel_workflows(signatures, p, ("router", "scripted conductor"))
        for p in ("trained", "warm start")
        if p in signatures
    }
    return {
        "tasks": len(next(iter(by.values()))),
        "cost_weight": cost_weight,
        "strategies": summaries,
        "paired": tests,
        "novel_workflows": novel,
        "oracle_choices": {
            key: sorted([list(map(str, cls)), name] for cls, name in chosen.items()) for key, chosen in oracle.items()
        },
        "written": {p: dict(Counter(signatures[p]).most_common(12)) for p in ("trained", "warm start") if p in by},
        "steps_by_difficulty": steps_by_difficulty(by),
        "assessed": {
            name: {
                "tasks": len(rs),
                "right": statistics.fmean(r["assessed"] == r["difficulty"] for r in rs),
                "unreadable": statistics.fmean(r["assessed"] is None for r in rs),
            }
            for name, rs in by.items()
            if rs and "assessed" in rs[0]
        },
    }


def diagnosis(card: dict[str, Any]) -> dict[str, Any]:
    """What GRPO had to learn from, in its card's per-step rollout statistics: the reward curve's ends, the reward
    spread within groups, the flat groups, the variety of completions and the most written ones, first and last."""
    steps = card.get("rollouts") or []
    if not steps:
        return {}
    fifth = max(1, len(steps) // 5)

    def mean(key: str, part: list[dict[str, Any]]) -> float:
        return statistics.fmean(s[key] for s in part)

    ends = {"first fifth": steps[:fifth], "last fifth": steps[-fifth:]}
    return {
        "steps": len(steps),
        "wall_s": card.get("wall_s", {}),
        **{
            f"{key} ({end})": mean(key, part)
            for key in ("mean", "correct", "group_std", "distinct_per_group", "well_formed")
            for end, part in ends.items()
        },
        "flat groups": sum(s["flat_groups"] for s in steps),
        "groups": sum(s["groups"] for s in steps),
        "most written (first step)": steps[0]["most_written"],
        "most written (last step)": steps[-1]["most_written"],
    }


def shape_table(shapes: dict[str, dict[str, float]]) -> list[str]:
    """Steps per task by difficulty (steps_by_difficulty) as a markdown table, after a blank line."""
    difficulties = list(next(iter(shapes.values())))
    head = ["", "Steps per task by the task's difficulty:", "", "| strategy | " + " | ".join(difficulties) + " |"]
    rows = [f"| {name} | " + " | ".join(f"{v:.2f}" for v in per.values()) + " |" for name, per in shapes.items()]
    return [*head, "|---|" + "---|" * len(difficulties), *rows]


def assessed_lines(assessed: dict[str, dict[str, Any]]) -> list[str]:
    """How often each policy wrote the task's own difficulty (the assessed encoding), after a blank line."""
    head = ["", "The difficulty each policy wrote before its steps (the assessed encoding):", ""]
    return head + [
        f"- {name}: the task's own on {a['right']:.3f} of {a['tasks']} tasks; none readable on {a['unreadable']:.3f}"
        for name, a in assessed.items()
    ]


def markdown(report: dict[str, Any]) -> str:
    """The judgement as a README section's tables."""
    lines = [
        f"{report['tasks']} held-out tasks (held-out templates, permuted held-out sub-pools), reward at cost weight "
        f"{report['cost_weight']}.",
        "",
        "| strategy | accuracy | mean reward | tokens/task | tokens vs MoA | USD/task | steps/task | well-formed | "
        "distinct | specialist first |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in report["strategies"].items():
        versus = f"{m['tokens_vs_moa']:.3f}" if m["tokens_vs_moa"] is not None else "-"
        pick = f"{m['specialist_pick']:.3f}" if m.get("specialist_pick") is not None else "-"
        lines.append(
            f"| {name} | {m['accuracy']:.3f} | {m['mean_reward']:.3f} | {m['tokens_per_task']:.0f} | {versus} | "
            f"{m['usd_per_task']:.5f} | {m['steps_per_task']:.2f} | {m['well_formed']:.2f} | {m.get('distinct', '-')} "
            f"| {pick} |"
        )
    lines += [
        "",
        "Paired tests (exact McNemar on correctness; paired t on reward, two-sided: p by the normal approximation, "
        "t p by Student's t, the exact test):",
        "",
        "| comparison | only first right | only second right | McNemar p | reward diff | se | p | t p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in report["paired"].items():
        c, r = t["correct"], t["reward"]
        lines.append(
            f"| {name} | {c['wins']} | {c['losses']} | {c['p_value']:.3g} | {r['mean_diff']:+.4f} | "
            f"{r['se']:.4f} | {r['p_value']:.3g} | {r['t_p_value']:.3g} |"
        )
    if report.get("best_fixed_completion"):
        lines += [
            "",
            f"The best fixed completion, chosen on training tasks among one per repetition pattern and flags: "
            f"`{report['best_fixed_completion']}`. Distinct: the distinct completions over the ids the conductor saw. "
            "Specialist first: where the sub-pool holds the domain's specialist, the share whose first step is it.",
        ]
    for policy, novel in report["novel_workflows"].items():
        lines += [
            "",
            f"Workflows the {policy} policy writes that neither the router nor the scripted conductor "
            f"writes on the same task: {novel['tasks']} tasks ({novel['share']:.1%}); by shape "
            f"{novel['by_shape']}; most common {novel['examples']}.",
        ]
    for policy, counts in report["written"].items():
        lines += ["", f"Most written by the {policy} policy (over real worker ids): {counts}"]
    if report.get("steps_by_difficulty"):
        lines += shape_table(report["steps_by_difficulty"])
    if report.get("assessed"):
        lines += assessed_lines(report["assessed"])
    if report.get("diagnosis"):
        lines += ["", "GRPO's rollouts (card.json `rollouts`, rollouts.png):", ""]
        lines += [
            f"- {key}: {value:.3f}" if isinstance(value, float) else f"- {key}: {value}"
            for key, value in report["diagnosis"].items()
        ]
    return "\n".join(lines) + "\n"
