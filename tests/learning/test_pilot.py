"""The real-outcome pilot's task generator, answer checker and verdict (learning/pilot.py): tasks whose answers are
right by an independent computation, the same on every run, and a checker that accepts the answer and nothing
else."""

from __future__ import annotations

import datetime
import re

import pytest

from conductor_mcp.core.limits import PILOT_ANSWER_CHARS
from conductor_mcp.learning import pilot


def test_tasks_are_deterministic_distinct_and_per_family() -> None:
    first, again = pilot.task_set(30), pilot.task_set(30)
    assert first == again and len(first) == 120
    for family in pilot.FAMILIES:
        questions = [t.question for t in first if t.family == family]
        assert len(questions) == len(set(questions)) == 30
    assert pilot.task_set(30, seed="other") != first
    with pytest.raises(ValueError, match="unknown task family 'chess'"):
        pilot.tasks("chess", 3, "pilot")


def test_every_answer_is_right_by_an_independent_computation() -> None:
    weekdays = [datetime.date(2024, 1, 1 + i).strftime("%A").lower() for i in range(7)]  # 2024-01-01 is a Monday
    months = [datetime.date(2024, m, 1).strftime("%B").lower() for m in range(1, 13)]
    factors = {("meters", "centimeters"): 100, ("hours", "minutes"): 60, ("feet", "inches"): 12}
    checked = 0
    for task in pilot.task_set(30):
        q = task.question
        if m := re.fullmatch(r"What is (\d+) ([+*-]) (\d+)\?", q):
            a, op, b = int(m[1]), m[2], int(m[3])
            assert int(task.answer) == {"+": a + b, "-": a - b, "*": a * b}[op]
        elif m := re.fullmatch(r"Reverse the word '(\w+)'\.", q):
            assert task.answer == "".join(reversed(m[1]))
        elif m := re.fullmatch(r"How many letters are in the word '(\w+)'\?", q):
            assert task.answer == str(len(m[1]))
        elif m := re.fullmatch(r"What is the (first|last) letter of the word '(\w+)'\?", q):
            assert task.answer == m[2][0 if m[1] == "first" else -1]
        elif m := re.fullmatch(r"What day of the week is (\d+) days? after (\w+)\?", q):
            assert task.answer == weekdays[(weekdays.index(m[2].lower()) + int(m[1])) % 7]
        elif m := re.fullmatch(r"Which month is (\d+) months? after (\w+)\?", q):
            assert task.answer == months[(months.index(m[2].lower()) + int(m[1])) % 12]
        elif m := re.fullmatch(r"What date is (\d+) days? after (\S+)\? Answer as YYYY-MM-DD\.", q):
            start = datetime.date.fromisoformat(m[2])
            assert datetime.date.fromisoformat(task.answer) - start == datetime.timedelta(days=int(m[1]))
        elif m := re.fullmatch(r"How many (\w+) are in (\d+) (\w+)\?", q):
            if (m[3], m[1]) in factors:
                assert int(task.answer) == int(m[2]) * factors[(m[3], m[1])]
        else:
            raise AssertionError(f"a question the test does not know: {q!r}")
        checked += 1
    assert checked == 120


def test_the_checker_reads_the_answer_and_only_the_answer() -> None:
    date = pilot.Task("d", "dates", "What date is 3 days after 2024-02-27? Answer as YYYY-MM-DD.", "2024-03-01")
    assert pilot.correct(date, " 2024-03-01")
    assert pilot.correct(date, "\n 2024-03-01.\nQuestion: more")
    assert not pilot.correct(date, " 2024-03-02") and not pilot.correct(date, " March 1st, 2024")
    number = pilot.Task("n", "units", "How many minutes are in 2 hours?", "120")
    assert pilot.correct(number, " 120 minutes") and not pilot.correct(number, " 1200")
    assert not pilot.correct(number, " The answer is 120")  # the first word is the answer it gave
    assert not pilot.correct(number, "")
    word = pilot.Task("w", "dates", "Which month is 1 month after May?", "june")
    assert pilot.correct(word, " June.") and not pilot.correct(word, " July")
    assert pilot.extract("x" * PILOT_ANSWER_CHARS + " 5") is not None and pilot.extract(" " * 300 + "5") is None


def test_a_specialist_prompt_teaches_its_family_without_the_question() -> None:
    task = pilot.tasks("units", 1, "pilot")[0]
    prompt = pilot.few_shot_prompt("units", task.question)
    assert prompt.endswith(f"Question: {task.question}\nAnswer:") and prompt.count("Question:") == pilot.SHOTS + 1
    assert prompt.count(task.question) == 1
    examples = pilot.tasks("units", pilot.SHOTS + 1, "pilot:shots")
    shown = [t for t in examples if t.question != task.question][: pilot.SHOTS]
    assert all(f"Question: {t.question}\nAnswer: {t.answer}\n" in prompt for t in shown)


def test_the_verdict_needs_every_specialist_ahead_and_no_worker_good_at_everything() -> None:
    def rows(accuracy: dict[str, dict[str, float]]) -> list[tuple[str, pilot.Task, bool]]:
        out = []
        for worker, row in accuracy.items():
            for family, value in row.items():
                for i in range(10):
                    out.append((worker, pilot.Task(f"{family}-{i}", family, "q", "a"), i < value * 10))
        return out

    strong = {w: {f: 0.6 if f == w else 0.2 for f in pilot.FAMILIES} for w in pilot.FAMILIES}
    table = pilot.table(rows(strong))
    assert table.go() and table.margin("dates") == pytest.approx(0.4) and table.overall("units") == pytest.approx(0.3)
    close = {**strong, "units": {**strong["units"], "dates": 0.5}}  # dates' specialist only 0.1 ahead
    assert not pilot.table(rows(close)).go()
    generalist = {w: {f: 0.9 if f == w else 0.7 for f in pilot.FAMILIES} for w in pilot.FAMILIES}
    assert not pilot.table(rows(generalist)).go()  # margins of 0.2, but one worker would do for everything
