"""The README stays short and keeps the two commands CI and a new user run, character for character."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[1]
RUN = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[local]' && "
    '.venv/bin/conductor-mcp run "What is the capital of France?"'
)
TEST = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev,local]' && .venv/bin/python -m pytest -q"


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text()) <= 8000


def test_the_readme_has_both_commands_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    assert RUN in readme and TEST in readme  # each alone on its line, as a reader copies it
    assert TEST in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_links_only_to_pages_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    targets = [part.split(")")[0] for part in text.split("](")[1:]]
    local = [t.split("#")[0] for t in targets if not t.startswith(("http", "#"))]
    assert local and all((ROOT / t).is_file() for t in local), [t for t in local if not (ROOT / t).is_file()]
