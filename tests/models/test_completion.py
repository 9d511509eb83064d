"""Base-model answers cut where the answer ends (the real model's side is in test_local.py)."""

from __future__ import annotations

import re

from conductor_mcp.core.prompts import worker_messages
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.models.completion import STOP_SEQUENCES, completion_prompt, completion_stops, end_of_answer


def test_the_answer_is_cut_before_the_next_part_of_a_prompt() -> None:
    assert end_of_answer("\nParis.\n\nQuestion: And Italy?\nAnswer: Rome.") == "Paris."
    assert end_of_answer(" Paris.\n\nStep 1: answer:\nParis.\n\nStep 2: answer:") == "Paris."
    assert end_of_answer("Paris.\n## Notes\nmore") == "Paris."
    assert end_of_answer("Answer: Paris.\nQuestion: more") == "Answer: Paris."  # a marker before any answer stays


def test_a_loop_is_cut_but_short_repeated_lines_stay() -> None:
    looping = "The capital of France is Paris.\nThe capital of France is Paris.\nThe capital of France is Paris."
    assert end_of_answer(looping) == "The capital of France is Paris."
    code = "def f():\n    if x:\n        return 1\n    }\n    }\n    return 2"
    assert end_of_answer(code) == code
    assert end_of_answer("Step 1: mix the flour.\nStep 2: bake it.") == "Step 1: mix the flour.\nStep 2: bake it."


def test_the_pools_stops_come_first() -> None:
    assert completion_stops(None) == list(STOP_SEQUENCES)
    assert completion_stops("\n\n") == ["\n\n", *STOP_SEQUENCES]
    assert completion_stops(["\nAnswer:", "END"]) == [
        "\nAnswer:",
        "END",
        *(s for s in STOP_SEQUENCES if s != "\nAnswer:"),
    ]


def test_every_heading_of_a_flattened_worker_prompt_is_a_cut_marker() -> None:
    """An edit of core/prompts.py's headings that the cut does not know would let models copy it unchecked."""
    workflow = Workflow(
        steps=[Step(worker="a", instruction="Solve.", access=[]), Step(worker="a", instruction="Check.", access=[0])]
    )
    prompt = completion_prompt(worker_messages("Task text", "Some context", workflow, 1, {0: "An answer."}))
    headings = [line for line in prompt.splitlines() if re.fullmatch(r"[A-Z][^.]*:", line)]
    assert len(headings) >= 5, prompt  # Task, Context, the team's work, Step 0 instruction and answer, Your instruction
    for heading in headings:
        assert end_of_answer(f"An answer.\n{heading}\nmore") == "An answer.", heading
