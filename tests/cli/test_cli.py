"""The CLI as users run it: a real subprocess, a real SQLite file, output read back in a later process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conductor_mcp.core.records import Run, StepRecord
from conductor_mcp.runs.sqlite import SqliteStore
from conductor_mcp.runs.store import SCHEMA_VERSION

pytestmark = [pytest.mark.slow]


def cli(*args: str, env_extra: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "conductor_mcp", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )


def test_run_json_then_show_in_a_new_process(tmp_path: Path) -> None:
    meta = json.dumps({"domain": "math", "answer": "42", "difficulty": "hard"})
    result = cli(
        "--state-dir", str(tmp_path), "run", "--pool", "sim", "--json", "--metadata", meta, "What is six times seven?"
    )
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)  # stdout holds the JSON document and nothing else
    assert run["status"] == "done" and run["answer"] and "ANSWER:" in run["answer"]
    assert run["conductor_calls"][0]["raw_output"]
    for step in run["steps"]:
        assert step["prompt_tokens"] > 0 and step["completion_tokens"] > 0
        assert step["cost_usd"] > 0 and step["latency_s"] > 0 and step["answered_by"].startswith("sim/")
    assert "step 0 started" in result.stderr  # progress on stderr

    shown = cli("--state-dir", str(tmp_path), "show", run["id"], "--json")
    assert shown.returncode == 0
    again = json.loads(shown.stdout)
    assert again["answer"] == run["answer"] and len(again["steps"]) == len(run["steps"])
    markdown = cli("--state-dir", str(tmp_path), "show", run["id"]).stdout
    assert markdown.startswith("## Answer") and "```mermaid" in markdown
    listing = cli("--state-dir", str(tmp_path), "runs").stdout
    assert run["id"] in listing and "done" in listing


def test_no_command_leaves_a_lease_behind(tmp_path: Path) -> None:
    """Each command that runs (run, plan) takes a lease and gives it back on the way out; reading ones (show, runs,
    pools, view) take none. Before the service owned its lifespan every command left leases/<pid>-<hex>.lock."""
    state = ["--state-dir", str(tmp_path)]
    ran = cli(*state, "run", "--pool", "sim", "--json", "What is six times seven?")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["id"]
    for args in (["plan", "--pool", "sim", "Design a cache."], ["show", run_id], ["runs"], ["pools"]):
        assert cli(*state, *args).returncode == 0, args
    view = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", *state, "view", run_id, "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert view.stdout is not None and "run viewer (read only) at http://127.0.0.1:" in view.stdout.readline()
    finally:
        view.send_signal(signal.SIGINT)  # at once: the URL is printed only once a Ctrl-C stops the viewer cleanly
        returncode = view.wait(timeout=30)
    assert returncode == 0, view.stderr.read() if view.stderr else ""
    assert (tmp_path / "runs.sqlite3").exists() and (tmp_path / "leases").is_dir()
    assert list((tmp_path / "leases").iterdir()) == []


def test_plan_from_stdin_and_markdown(tmp_path: Path) -> None:
    result = cli("--state-dir", str(tmp_path), "plan", "-", stdin="Design a cache eviction policy.")
    assert result.returncode == 0, result.stderr
    assert "status **planned**" in result.stdout and "Planned workflow" in result.stdout


def test_pools_lists_and_validates(tmp_path: Path) -> None:
    result = cli("pools")
    assert result.returncode == 0
    assert {line.split()[0] for line in result.stdout.splitlines()} >= {"sim", "frontier", "paper"}
    (tmp_path / "broken.yaml").write_text("conductor: {model: sim/conductor}\nworkers: []\n")
    broken = cli("pools", "--json", env_extra={"CONDUCTOR_POOL_PATH": str(tmp_path)})
    assert broken.returncode == 2
    entry = next(p for p in json.loads(broken.stdout) if p["name"] == "broken")
    assert "broken.yaml" in entry["error"] and "workers" in entry["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "feedfacefeedface"], "no run with id 'feedfacefeedface'"),
        (["run", "--pool", "nope", "task"], "unknown pool 'nope'"),
        (["run", "--max-steps", "99", "task"], "max_steps: must be between 1 and 20"),
        (["run", "--metadata", "[1]", "task"], "--metadata: must be a JSON object"),
        (["run", "--context-file", "/nonexistent/file", "task"], "No such file"),
    ],
)
def test_bad_input_exits_2_with_a_named_error(tmp_path: Path, args: list[str], message: str) -> None:
    result = cli("--state-dir", str(tmp_path), *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_control_characters_from_a_task_never_reach_the_terminal(tmp_path: Path) -> None:
    """A remote caller's task (or a model's answer) with ESC sequences is shown escaped, not obeyed."""
    hostile = "What is 2+2?\x1b[2J\x1b]0;owned\x07\r"
    assert cli("--state-dir", str(tmp_path), "run", "--quiet", hostile).returncode == 0
    listing = cli("--state-dir", str(tmp_path), "runs")
    run_id = listing.stdout.split()[0]
    shown = cli("--state-dir", str(tmp_path), "show", run_id)
    for output in (listing.stdout, shown.stdout):
        assert "\x1b" not in output and "\x07" not in output and "\r" not in output
    assert "\\x1b[2J" in listing.stdout  # shown, escaped


def test_a_setting_that_does_not_parse_names_the_variable(tmp_path: Path) -> None:
    result = cli("--state-dir", str(tmp_path), "runs", env_extra={"CONDUCTOR_SERVER_MAX_TOKENS": "lots"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "CONDUCTOR_SERVER_MAX_TOKENS" in result.stderr and "'lots'" in result.stderr


def test_failed_run_exits_1(tmp_path: Path) -> None:
    result = cli("--state-dir", str(tmp_path), "run", "--max-tokens", "10", "--json", "task")
    assert result.returncode == 1
    assert "token budget reached" in json.loads(result.stdout)["error"]


def _stored_runs(state: Path, *statuses: str) -> None:
    """Runs written straight to the store (no CLI process, no model call), each with a sizeable step."""
    store = SqliteStore(state / "runs.sqlite3")
    for n, status in enumerate(statuses):
        run = Run(id=f"run-{n}", task="t", pool="sim", pool_digest="d", conductor_model="m", max_steps=1)
        run.status = status  # type: ignore[assignment]
        store.save_run(run)
        step = StepRecord(key="0", index=0, worker_id="w", visible_id="model_0", model="m", instruction="i")
        store.save_step(run.id, 0, step, [{"role": "user", "content": "x" * 100_000}])
    store.close()


def test_a_corrupt_store_is_one_line_and_exit_2_for_every_command(tmp_path: Path) -> None:
    """Garbage over runs.sqlite3: the CLI, doctor and the stdio MCP server each say which file and what to do."""
    _stored_runs(tmp_path, "done")
    store = tmp_path / "runs.sqlite3"
    store.write_bytes(os.urandom(store.stat().st_size))
    for args in (["runs"], ["serve"]):
        result = cli("--state-dir", str(tmp_path), *args, stdin="")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert str(store) in line and "is corrupt" in line and "move it aside" in line
        assert result.stdout == ""
    doctor = cli("--state-dir", str(tmp_path), "doctor")
    assert doctor.returncode == 2 and "Traceback" not in doctor.stderr
    assert f"run store: sqlite at {store}" in doctor.stdout
    assert "NOT USABLE" in doctor.stdout and "move it aside" in doctor.stdout
    store.rename(tmp_path / "runs.sqlite3.corrupt")
    listing = cli("--state-dir", str(tmp_path), "runs")
    assert listing.returncode == 0 and listing.stdout.strip() == "no runs yet"


def test_runs_prune_deletes_old_runs_and_doctor_reports_the_store(tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path)]
    _stored_runs(tmp_path, "done", "failed", "running")
    doctor = cli(*state, "doctor")
    assert (
        f"run store: sqlite at {tmp_path / 'runs.sqlite3'}" in doctor.stdout and "oldest run created" in doctor.stdout
    )
    assert f"reachable, schema version {SCHEMA_VERSION}" in doctor.stdout
    assert "1 done, 1 failed, 1 running" in doctor.stdout
    dry = cli(*state, "runs", "prune", "--older-than", "0", "--status", "done", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("would delete 1 runs (0.10 MiB of run data)"), dry.stderr
    pruned = cli(*state, "runs", "prune", "--older-than", "0")
    assert pruned.returncode == 0 and pruned.stdout.startswith("deleted 2 runs") and "vacuumed" in pruned.stdout
    assert [row["id"] for row in SqliteStore(tmp_path / "runs.sqlite3").list_runs()] == ["run-2"]  # never a running run
    refused = cli(*state, "runs", "prune", "--older-than", "0", "--status", "running")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr


def test_doctor_reports_a_postgresql_store_and_an_unreachable_one(tmp_path: Path, postgres_url: str) -> None:
    doctor = cli("--state-dir", str(tmp_path), "doctor", env_extra={"CONDUCTOR_DATABASE_URL": postgres_url})
    assert doctor.returncode == 0, doctor.stderr
    assert f"run store: postgresql at {postgres_url}" in doctor.stdout
    assert f"reachable, schema version {SCHEMA_VERSION}" in doctor.stdout and "no runs" in doctor.stdout
    down_url = "postgresql://me:hunter2secret@127.0.0.1:1/nowhere"
    down = cli("--state-dir", str(tmp_path), "doctor", env_extra={"CONDUCTOR_DATABASE_URL": down_url})
    assert down.returncode == 2 and "NOT USABLE" in down.stdout and "cannot be reached" in down.stdout
    assert "hunter2secret" not in down.stdout + down.stderr and "me:***@127.0.0.1:1/nowhere" in down.stdout
