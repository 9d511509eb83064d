"""Prompting base models (a worker's `prompt_style: completion`): the chat messages flattened into the
Question/Answer text a base model continues, the stop sequences that end its answer, and the cut of whatever
it wrote past the answer anyway.

A base model does not stop where the answer ends: it goes on with the next question, a copy of the prompt's
headings ("Step 2: answer:"), or the same line again until max_tokens. The markers below are the ones the
prompt itself uses (core/prompts.py's headings, flattened here), so they are what a model imitates.
"""

from __future__ import annotations

import re
from typing import Any

_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
QUESTION, ANSWER = "Question:", "Answer:"
# Stop sequences every completion-style call gets, before the pool's own: a new question or answer line, a
# heading of the worker prompt, a run of blank lines. Cheap to stop on; precise markers are left to the cut.
STOP_SEQUENCES = (f"\n{QUESTION}", f"\n{ANSWER}", "\nTask:", "\nYour instruction:", "\n\n\n")
# A line that starts something other than the answer: the prompt's own markers as completion_prompt writes
# them (Question/Answer, and core/prompts.py's worker headings: Task, Context, the team's work, each seen
# step's instruction and answer, Your instruction), or a markdown heading.
_NEXT_PART = re.compile(
    r"^\s*(?:(?:Question|Answer|Task|Context|Your instruction|Work from your team that you may use"
    r"|Step \d+: (?:instruction|answer))\s*:|#{1,6}\s)",
    re.MULTILINE,
)
MIN_REPEATED_LINE_CHARS = 12  # shorter repeated lines ("}", "end", "- yes") are normal in answers


def completion_prompt(messages: list[dict[str, Any]]) -> str:
    """Chat messages as one Question/Answer prompt, the form a base model continues sensibly.

    Markdown headings become plain "Heading:" lines: after "# ..." lines a small base model tends to answer
    with nothing or with more headings.
    """
    parts = []
    for message in messages:
        content = _HEADING.sub(r"\1:", str(message.get("content") or "").strip())
        if message.get("role") == "system":
            parts.append(f"{content}\n")
        elif message.get("role") == "assistant":
            parts.append(f" {content}\n")
        else:
            parts.append(f"{QUESTION} {content}\n{ANSWER}")
    return "\n".join(parts)


def completion_stops(pool_stops: str | list[str] | None) -> list[str]:
    """The stop sequences of a completion-style call: the pool's own (kept first), then STOP_SEQUENCES."""
    own = [pool_stops] if isinstance(pool_stops, str) else list(pool_stops or [])
    return own + [stop for stop in STOP_SEQUENCES if stop not in own]


def end_of_answer(text: str) -> str:
    """A base model's continuation cut where its answer ends: before the first line that starts the next part
    of a prompt (a question, an answer, a step, a heading), and before a line that repeats the one above it
    (a model caught in a loop). Text before any such line is kept as written."""
    for match in _NEXT_PART.finditer(text):
        if text[: match.start()].strip():
            text = text[: match.start()]
            break
    kept: list[str] = []
    for line in text.splitlines():
        previous = next((seen for seen in reversed(kept) if seen.strip()), None)
        if previous is not None and len(line.strip()) >= MIN_REPEATED_LINE_CHARS and line.strip() == previous.strip():
            break
        kept.append(line)
    return "\n".join(kept).strip()
