"""The suite's own guard (tests/owned_tasks.py), run on a small test file by a real pytest in a fresh process: a
task a test leaves running or unawaited fails that test, and can no longer break a later one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

LEAKS = '''
import ast
import asyncio
import gc


async def fail() -> int:
    found = {"a": [1]}
    return found["a"][0] + found["b"][0]  # its traceback has carets, which CPython 3.11 places with ast.parse


async def test_leaves_a_task_running() -> None:
    asyncio.create_task(asyncio.sleep(60), name="sleeper")


async def test_leaves_a_failed_task_unread() -> None:
    task = asyncio.create_task(fail(), name="failer")
    while not task.done():
        await asyncio.sleep(0)
    cycle: list[object] = [task]
    cycle.append(cycle)  # only the collector frees it, at whatever moment it runs


async def test_awaits_its_task() -> None:
    task = asyncio.create_task(fail())
    try:
        await task
    except KeyError:
        pass


def test_parses_while_the_collector_runs() -> None:
    """What pytest does to report a failure: an unread task finalized now formats its traceback inside ast.parse,
    and CPython 3.11 raises SystemError (as pytest's own INTERNALERROR when it happens in pytest's parse)."""
    source = "\\n".join(f"def f{i}(a):\\n    return [a + b for b in range(3)]" for i in range(500))
    gc.set_threshold(1)
    try:
        ast.parse(source)
    finally:
        gc.set_threshold(700)
'''


@pytest.mark.slow  # a pytest process
def test_a_task_left_behind_fails_its_test_and_cannot_break_a_later_one(tmp_path: Path) -> None:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "300"}
    plugins = ["-p", "pytest_asyncio.plugin", "-p", "tests.owned_tasks"]
    options = ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *plugins, *options, "test_leaks.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert "ERROR test_leaks.py::test_leaves_a_task_running - Failed: tasks left behind" in out, out
    assert "sleeper (sleep) was still running" in out, out
    assert "ERROR test_leaks.py::test_leaves_a_failed_task_unread - Failed: tasks left behind" in out, out
    assert "failer (fail) ended with KeyError: 'b' and nobody awaited it" in out, out
    assert "PASSED test_leaks.py::test_awaits_its_task" in out, out
    assert "PASSED test_leaks.py::test_parses_while_the_collector_runs" in out, out
    assert "never retrieved" not in out + done.stderr and "INTERNALERROR" not in out, out
    assert out.rstrip().splitlines()[-1].startswith("4 passed, 2 errors in"), out
