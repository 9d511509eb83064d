"""The real-outcome pilot (issue #39 item 5): can the embedded model, made into specialists by domain few-shot
prompts, give a pool in which worker choice is decisive? A go/no-go before anyone builds a table of real outcomes
for GRPO to train on.

Tasks come from four families with answers a program can check (arithmetic, string operations, dates, unit
conversion), generated deterministically from a seed. Each worker is the same model behind a prompt of few-shot
examples from one family (drawn from a seed of their own, so no example is a test task). Every worker answers
every task greedily; the table is each worker's accuracy per family. Go only where each specialist beats the best
other worker on its own family by GO_MARGIN and no worker's overall accuracy exceeds GO_BEST_CEILING (a worker
that answers everything well leaves nothing to conduct).
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from conductor_mcp.core.limits import PILOT_ANSWER_CHARS, PILOT_ANSWER_TOKENS
from conductor_mcp.models import local_slots

FAMILIES = ("arithmetic", "strings", "dates", "units")
GO_MARGIN = 0.15
GO_BEST_CEILING = 0.7
SHOTS = 5

_WORDS = (
    "apple",
    "river",
    "candle",
    "garden",
    "pencil",
    "silver",
    "monkey",
    "planet",
    "window",
    "basket",
    "tiger",
    "orange",
    "castle",
    "button",
    "jungle",
    "rocket",
    "violin",
    "marble",
    "pepper",
    "lemon",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
# (from unit, to unit, factor): answers are whole numbers by construction
_CONVERSIONS = (
    ("meters", "centimeters", 100),
    ("kilometers", "meters", 1000),
    ("kilograms", "grams", 1000),
    ("hours", "minutes", 60),
    ("minutes", "seconds", 60),
    ("days", "hours", 24),
    ("feet", "inches", 12),
    ("liters", "milliliters", 1000),
)


@dataclass(frozen=True)
class Task:
    id: str
    family: str
    question: str
    answer: str  # canonical: an integer's digits, a lowercase word, or YYYY-MM-DD


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    big = rng.random() < 0.25  # a quarter of two-digit sums, the rest single digits
    a, b = (rng.randint(10, 60), rng.randint(10, 40)) if big else (rng.randint(1, 9), rng.randint(1, 9))
    op = "+" if big else rng.choice("+-*")
    if op == "-":
        a, b = max(a, b), min(a, b)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"What is {a} {op} {b}?", str(value)


def _strings(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(_WORDS)
    kind = rng.randrange(4)
    if kind == 0:
        return f"Reverse the word '{word}'.", word[::-1]
    if kind == 1:
        return f"How many letters are in the word '{word}'?", str(len(word))
    if kind == 2:
        return f"What is the last letter of the word '{word}'?", word[-1]
    return f"What is the first letter of the word '{word}'?", word[0]


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def _round_the_cycle(rng: random.Random, question: str, names: tuple[str, ...], unit: str) -> tuple[str, str]:
    """A weekday or month 1-3 steps after another, round the week or year."""
    start = rng.randrange(len(names))
    steps = rng.randint(1, 3)
    return f"{question} {_plural(steps, unit)} after {names[start]}?", names[(start + steps) % len(names)].lower()


def _dates(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(3)
    if kind == 0:
        return _round_the_cycle(rng, "What day of the week is", _WEEKDAYS, "day")
    if kind == 1:
        return _round_the_cycle(rng, "Which month is", _MONTHS, "month")
    day = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(366))
    days = rng.randint(1, 9)
    later = day + datetime.timedelta(days=days)
    return f"What date is {_plural(days, 'day')} after {day.isoformat()}? Answer as YYYY-MM-DD.", later.isoformat()


def _units(rng: random.Random) -> tuple[str, str]:
    source, target, factor = rng.choice(_CONVERSIONS)
    amount = rng.randint(2, 6)
    return f"How many {target} are in {amount} {source}?", str(amount * factor)


_GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "arithmetic": _arithmetic,
    "strings": _strings,
    "dates": _dates,
    "units": _units,
}


def tasks(family: str, count: int, seed: str) -> list[Task]:
    """`count` distinct tasks of one family, the same for the same seed on every machine."""
    if family not in _GENERATORS:
        raise ValueError(f"unknown task family {family!r}; known: {', '.join(FAMILIES)}")
    rng = random.Random(f"{seed}:{family}")
    found: dict[str, str] = {}
    for _ in range(count * 50):
        if len(found) == count:
            break
        question, answer = _GENERATORS[family](rng)
        found.setdefault(question, answer)
    if len(found) < count:
        raise ValueError(f"the {family} family has fewer than {count} distinct tasks")
    return [Task(f"{family}-{i}", family, q, a) for i, (q, a) in enumerate(found.items())]


def task_set(count: int, seed: str = "pilot") -> list[Task]:
    """`count` tasks of each family."""
    return [task for family in FAMILIES for task in tasks(family, count, seed)]


def few_shot_prompt(family: str, question: str, seed: str = "pilot") -> str:
    """A specialist's completion prompt: SHOTS solved examples of its family, then the question. The examples
    come from a seed of their own and never repeat the question."""
    examples = [t for t in tasks(family, SHOTS + 1, f"{seed}:shots") if t.question != question][:SHOTS]
    lines = [f"Question: {t.question}\nAnswer: {_shown(t)}\n" for t in examples]
    return "".join(lines) + f"Question: {question}\nAnswer:"


def _shown(task: Task) -> str:
    """How an example's answer is written in a prompt (words capitalised as people write them)."""
    return task.answer.capitalize() if task.answer.isalpha() and task.family == "dates" else task.answer


_TOKEN = re.compile(r"\d{4}-\d{2}-\d{2}|-?\d+|[a-z]+")


def extract(completion: str) -> str | None:
    """The answer a completion gives: the first date, integer or word on its first non-empty line."""
    for line in completion[:PILOT_ANSWER_CHARS].lower().splitlines():
        found = _TOKEN.search(line)
        if found:
            return found.group(0)
    return None


def correct(task: Task, completion: str) -> bool:
    """Whether the completion's answer is the task's (case and surrounding punctuation ignored)."""
    return extract(completion) == task.answer


@dataclass(frozen=True)
class Table:
    """Accuracy of each worker (a family's specialist) on each family."""

    accuracy: dict[str, dict[str, float]]  # worker family -> task family -> accuracy

    def overall(self, worker: str) -> float:
        return sum(self.accuracy[worker].values()) / len(self.accuracy[worker])

    def margin(self, family: str) -> float:
        """How much the family's specialist beats the best other worker on that family."""
        others = max(self.accuracy[w][family] for w in self.accuracy if w != family)
        return self.accuracy[family][family] - others

    def go(self) -> bool:
        return (
            all(self.margin(f) >= GO_MARGIN for f in self.accuracy)
            and max(self.overall(w) for w in self.accuracy) <= GO_BEST_CEILING
        )


def table(results: list[tuple[str, Task, bool]]) -> Table:
    """The table from (worker, task, correct) rows."""
    counts: dict[str, dict[str, list[int]]] = {}
    for worker, task, ok in results:
        cell = counts.setdefault(worker, {}).setdefault(task.family, [0, 0])
        cell[0] += ok
        cell[1] += 1
    return Table({w: {f: right / total for f, (right, total) in row.items()} for w, row in counts.items()})


def answer(base_url: str, model: str, prompt: str, timeout_s: float) -> str:
    """One greedy completion from a llama.cpp server, on the workers' slot (so a resident server's conductor
    slot keeps its prefix), stopped at the end of the answer line."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": PILOT_ANSWER_TOKENS,
        "temperature": 0,
        "stop": ["\n"],
        "id_slot": local_slots.WORKER_SLOT,
    }
    reply = local_slots.post(f"{base_url}/completions", body, timeout_s)
    return str(reply["choices"][0]["text"])[:PILOT_ANSWER_CHARS]


def markdown(result: Table, cpu_s: dict[str, float], command: str, count: int) -> str:
    """The pilot's report: the table, the margins, the verdict and what it cost."""
    workers = list(result.accuracy)
    lines = [
        "# Real-outcome pilot: the embedded model as four few-shot specialists",
        "",
        f"`{command}`",
        "",
        f"{count} tasks per family, {len(workers)} workers (Gemma 3 270M, greedy, {SHOTS} few-shot examples of the",
        "worker's own family), answers checked by program. Rows: the worker (the family its examples come from);",
        "columns: the task family.",
        "",
        "| worker | " + " | ".join(FAMILIES) + " | overall |",
        "|---" * (len(FAMILIES) + 2) + "|",
    ]
    for worker in workers:
        cells = " | ".join(f"{result.accuracy[worker][f]:.3f}" for f in FAMILIES)
        lines.append(f"| {worker} specialist | {cells} | {result.overall(worker):.3f} |")
    lines += [
        "",
        f"| family | specialist | best other | margin (go: >= {GO_MARGIN:.2f}) |",
        "|---|---|---|---|",
    ]
    for family in FAMILIES:
        best_other = result.accuracy[family][family] - result.margin(family)
        lines.append(
            f"| {family} | {result.accuracy[family][family]:.3f} | {best_other:.3f} | {result.margin(family):+.3f} |"
        )
    best = max(workers, key=result.overall)
    lines += [
        "",
        f"Best single worker: {best} specialist, {result.overall(best):.3f} overall (go: <= {GO_BEST_CEILING}).",
        "",
        f"**Verdict: {'GO' if result.go() else 'NO-GO'}**",
        "",
        "Seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu_s.items()),
        "",
    ]
    return "\n".join(lines)
