"""Agent steps through the engine: the service runs a workflow whose workers are a command agent (the simulator's
agent, under bubblewrap) and model workers, each agent step in a workspace of the run's scope, the record and diff
kept in the store, later steps shown the diff, a second agent building on the first one's result, the disk budget
held while agents write, and a change too large to keep summarised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_mcp.config import Settings
from conductor_mcp.core.prompts import CHANGE_HEADING
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.doors.mcp.results import run_result
from conductor_mcp.doors.render import to_markdown
from conductor_mcp.errors import RequestError
from conductor_mcp.models import sim_agent
from conductor_mcp.service.patches import apply_final_patch, patch_summary
from conductor_mcp.service.service import Service
from tests.agents.conftest import needs_bwrap
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer
from tests.conftest import ask, sim_pool_doc, until, write_pool
from tests.doors.viewer.test_viewer import BEARER, serving

pytestmark = [pytest.mark.slow, needs_bwrap]  # starts processes (git, bubblewrap, the agent)


def agent_pool(pool_dir: Path, **writer: Any) -> None:
    doc = sim_pool_doc(name="agents", anonymize=False)
    agent = {"cli": "command", "command": [sys.executable, sim_agent.__file__]}
    doc["workers"] = [
        {"id": "writer", "description": "writes files", "sandbox": "workspace-write", "agent": agent, **writer},
        {"id": "second", "description": "writes more files", "sandbox": "workspace-write", "agent": agent},
        {"id": "reader", "description": "reads files", "sandbox": "read-only", "agent": agent},
        *doc["workers"],
    ]
    write_pool(pool_dir, doc)


@pytest.fixture
def settings(tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path) -> Settings:
    return Settings.from_env(
        state_dir=tmp_path / "state", workspace_dir=agent_root, roots=(repo,)
    ).with_pool_dirs_first(pool_dir)


async def run_workflow(settings: Settings, steps: list[Step], **request: Any) -> Any:
    async with Service.open(settings) as service:
        started = service.start(ask("Add a feature.", pool="agents", **request), Workflow(steps=steps))
        run = await service.wait(started.id, None)
        stored = service.get_run(run.id)
        messages = {s.key: service.step_messages(run.id, s.key) for s in stored.steps}
        left = list(settings.workspace_root.rglob("feature.py"))
    return stored, messages, left


async def test_an_agent_writes_and_a_reviewer_sees_its_diff(settings: Settings, pool_dir: Path, repo: Path) -> None:
    agent_pool(pool_dir)
    before = fingerprint(repo)
    run, messages, left = await run_workflow(
        settings,
        [
            Step(worker="writer", instruction="sim-agent write feature.py: print(6 * 7)", access=[]),
            Step(worker="gamma", instruction="Review the change.", access=[0]),
        ],
    )
    assert run.status == "done", run.error
    first, second = run.steps
    assert first.work is not None and first.work.agent is not None
    assert first.output == first.work.agent.final_message and "wrote feature.py" in first.output
    assert [f.path for f in first.work.diff.files] == ["feature.py"] if first.work.diff else False
    assert "+print(6 * 7)" in (first.work.patch or "") and first.work.patch_files[0].added == 1
    assert first.work.agent.exit_status == 0 and first.work.agent.command_line
    assert first.work.base.source == str(repo) and first.work.base.kind == "worktree"
    shown = messages["1"][0]["content"]
    assert CHANGE_HEADING in shown and "+print(6 * 7)" in shown  # the reviewer saw the agent's diff
    assert second.work is None
    assert fingerprint(repo) == before  # the caller's tree is untouched
    assert left == []  # the run's workspaces went with it


async def test_a_second_agent_builds_on_the_first_and_the_patch_holds_both(
    settings: Settings, pool_dir: Path, repo: Path
) -> None:
    agent_pool(pool_dir)
    run, _, _ = await run_workflow(
        settings,
        [
            Step(worker="writer", instruction="sim-agent write feature.py: print(1)", access=[]),
            Step(worker="second", instruction="sim-agent write more.py: print(2)", access=[0]),
        ],
    )
    assert run.status == "done", run.error
    first, second = (s.work for s in run.steps)
    assert first is not None and second is not None and second.diff is not None
    assert second.base.parent == first.base.id and second.root == first.base
    assert [f.path for f in second.diff.files] == ["more.py"]  # its own work
    assert sorted(f.path for f in second.patch_files) == ["feature.py", "more.py"]  # the chain's, for apply
    assert "+print(1)" in (second.patch or "") and "+print(2)" in (second.patch or "")


async def test_a_failing_agent_is_a_named_step_failure_with_its_stderr_retried_once(
    settings: Settings, pool_dir: Path
) -> None:
    agent_pool(pool_dir)
    run, _, _ = await run_workflow(settings, [Step(worker="writer", instruction="sim-agent fail 3", access=[])])
    assert run.status == "failed"
    (step,) = run.steps
    assert step.status == "failed" and "exited with status 3" in (step.error or "")
    assert "sim-agent: failing as asked" in (step.error or "")  # the stderr tail
    assert [a.ok for a in step.attempts] == [False, False]
    assert step.work is not None and step.work.agent is not None and step.work.agent.exit_status == 3


async def test_a_fallback_model_answers_when_the_agent_fails(settings: Settings, pool_dir: Path) -> None:
    agent_pool(pool_dir, fallbacks=["gamma"])
    run, _, _ = await run_workflow(settings, [Step(worker="writer", instruction="sim-agent fail 3", access=[])])
    assert run.status == "done", run.error
    (step,) = run.steps
    assert [a.ok for a in step.attempts] == [False, False, True] and step.work is None


async def test_a_read_only_agent_cannot_write(settings: Settings, pool_dir: Path, repo: Path) -> None:
    agent_pool(pool_dir)
    before = fingerprint(repo)
    run, _, _ = await run_workflow(settings, [Step(worker="reader", instruction="sim-agent write x.py: 1", access=[])])
    (step,) = run.steps
    assert "Read-only file system" in (step.output or "")
    assert step.work is not None and step.work.diff is not None and step.work.diff.files == []
    assert step.work.patch is None and fingerprint(repo) == before


# A Codex-shaped CLI that changes nothing: its one command refused ("refused" in the prompt), or none, and either way
# it answers that it created a file.
UNDOING_CODEX = """#!/usr/bin/python3
import json, sys
if sys.argv[1:] == ["--version"]:
    print("fake-codex 1.0")
    sys.exit(0)
if "refused" in sys.stdin.read():
    output = "bwrap: execvp codex-linux-sandbox: No such file or directory"
    ran = {"type": "command_execution", "command": "touch feature.py", "aggregated_output": output, "exit_code": 1}
    print(json.dumps({"type": "item.completed", "item": ran}))
print(json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "I created feature.py."}}))
"""


async def test_an_agent_whose_commands_failed_or_that_changed_nothing_it_claims_is_a_warning(
    settings: Settings, pool_dir: Path, tmp_path: Path
) -> None:
    program = tmp_path / "fake-codex"
    program.write_text(UNDOING_CODEX)
    program.chmod(0o755)
    agent_pool(pool_dir, agent={"cli": "codex", "binary": str(program)})
    steps = [
        Step(worker="writer", instruction="Create feature.py (refused).", access=[]),
        Step(worker="writer", instruction="Create feature.py.", access=[]),
    ]
    run, _, _ = await run_workflow(settings, steps)
    assert run.status == "done", run.error
    warnings = [step.work.agent.warning if step.work and step.work.agent else None for step in run.steps]
    assert warnings == [
        "every command it ran failed or was refused (1)",
        "its answer speaks of a change ('I created feature.py.') but its workspace holds none",
    ]
    result = run_result(run)
    assert [step["warning"] for step in (result.structured_content or {})["steps"]] == warnings
    markdown = to_markdown(run)
    assert f"**Warning:** step 0: {warnings[0]}; step 1: {warnings[1]}" in markdown


async def test_kept_workspaces_stay_for_inspection(settings: Settings, pool_dir: Path) -> None:
    agent_pool(pool_dir)
    steps = [Step(worker="writer", instruction="sim-agent write feature.py: print(1)", access=[])]
    run, _, left = await run_workflow(settings, steps, keep_workspaces=True)
    assert run.status == "done" and len(left) == 1 and left[0].read_text() == "print(1)\n"


async def test_a_worker_that_cannot_run_here_is_not_offered(settings: Settings, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="agents", anonymize=False)
    missing = {"cli": "command", "command": ["/nonexistent/agent-cli"]}
    doc["workers"] = [{"id": "ghost", "description": "missing", "agent": missing}, *doc["workers"]]
    write_pool(pool_dir, doc)
    async with Service.open(settings) as service:
        pool = service.pools.for_request("agents")
        assert [w.id for w in pool.workers] == ["alpha", "beta", "gamma"]
        run = await service.orchestrate(ask("What is 2 + 2?", pool="agents"))
    assert run.status == "done" and all(s.worker_id != "ghost" for s in run.steps)


async def test_a_pool_whose_only_worker_cannot_run_is_a_named_error(settings: Settings, pool_dir: Path) -> None:
    doc = sim_pool_doc(name="agents", anonymize=False)
    doc["workers"] = [{"id": "ghost", "description": "missing", "agent": {"cli": "codex", "binary": "/no/codex"}}]
    write_pool(pool_dir, doc)
    async with Service.open(settings) as service:
        with pytest.raises(RequestError, match=r"no worker of pool 'agents' can run here.*'/no/codex' does not exist"):
            service.start(ask("What is 2 + 2?", pool="agents"))


async def test_the_agent_record_and_diff_round_trip_in_postgresql(
    settings: Settings, pool_dir: Path, postgres_url: str
) -> None:
    agent_pool(pool_dir)
    on_postgres = settings.model_copy(update={"database_url": postgres_url})
    steps = [Step(worker="writer", instruction="sim-agent write feature.py: print('\\x00 nul')", access=[])]
    run, _, _ = await run_workflow(on_postgres, steps)
    (step,) = run.steps
    assert run.status == "done" and step.work is not None and step.work.agent is not None
    assert step.work.diff is not None and [f.path for f in step.work.diff.files] == ["feature.py"]
    assert step.work.agent.command_line and "feature.py" in (step.work.patch or "")


def python_agent(pool_dir: Path, program: str, timeout_s: float = 60) -> None:
    """The agents pool whose `writer` is `python -c program` (after reading its prompt)."""
    agent_pool(pool_dir, timeout_s=timeout_s)
    doc = yaml.safe_load((pool_dir / "agents.yaml").read_text())
    doc["workers"][0]["agent"]["command"] = [sys.executable, "-c", f"import sys; sys.stdin.read()\n{program}"]
    (pool_dir / "agents.yaml").write_text(yaml.safe_dump(doc))


STEP = [Step(worker="writer", instruction="Write.", access=[])]
FILL = "with open('fill.bin', 'wb') as out:\n    for _ in range(12): out.write(bytes(2**20))\n"
STAYS = {"and exits": "print('filled')", "and stays": "import time; time.sleep(300)"}


@pytest.mark.parametrize("then", STAYS.values(), ids=STAYS.keys())
async def test_an_agent_that_writes_past_the_disk_budget_is_stopped(
    settings: Settings, pool_dir: Path, then: str
) -> None:
    python_agent(pool_dir, FILL + then)
    budget = 4 * 2**20  # the caller's repository takes a few kB of it
    run, _, _ = await run_workflow(settings.model_copy(update={"workspace_disk_gib": budget / 2**30}), STEP)
    (step,) = run.steps
    assert run.status == "failed" and step.status == "failed"
    assert f"over the disk budget: the workspaces under {settings.workspace_root} took" in (step.error or "")
    assert f"more than the {budget} of CONDUCTOR_WORKSPACE_DISK_GIB" in (step.error or "")
    assert [a.ok for a in step.attempts] == [False]  # not tried again: it would fill the disk again
    assert agent_processes(settings.workspace_root) == []


async def test_a_change_over_the_patch_cap_keeps_the_step_and_a_summary(settings: Settings, pool_dir: Path) -> None:
    python_agent(pool_dir, "open('big.txt', 'w').write(''.join(f'line {n}\\n' for n in range(20_000))); print('wrote')")
    cap = 64 * 1024  # the patch is about 250 kB
    run, _, _ = await run_workflow(settings.model_copy(update={"patch_max_mib": cap / 2**20}), STEP)
    (step,) = run.steps
    assert run.status == "done" and step.output == "wrote" and [a.ok for a in step.attempts] == [True]
    assert step.work is not None and step.work.patch is None
    assert (
        step.work.patch_note
        == f"too large to keep: the patch is over the {cap} bytes a run keeps (CONDUCTOR_PATCH_MAX_MIB)"
    )
    (big,) = step.work.patch_files
    assert (big.path, big.status, big.size, big.added, big.removed) == ("big.txt", "added", 208_890, 20_000, 0)
    assert step.work.diff is not None and step.work.diff.files == [big]  # its own change is the same


def agent_processes(root: Path) -> list[int]:
    """Live processes whose HOME is a workspace's home under `root` (what an agent left running)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0") if proc.name.isdigit() else []
            status = (proc / "status").read_text() if environ else ""
        except OSError:
            continue
        if any(e.startswith(f"HOME={root}".encode()) for e in environ) and "\nState:\tZ" not in status:
            found.append(int(proc.name))
    return found


async def test_cancelling_the_run_kills_the_agent_and_all_it_started(settings: Settings, pool_dir: Path) -> None:
    agent_pool(pool_dir)
    async with Service.open(settings) as service:
        steps = [Step(worker="writer", instruction="sim-agent spawn 120\nsim-agent sleep 120", access=[])]
        started = service.start(ask("Hang.", pool="agents"), Workflow(steps=steps))

        def ended() -> bool:  # an agent that cannot start fails the run at once: no use waiting for it
            return service.get_run(started.id).status not in ("planned", "running")

        await until(lambda: agent_processes(settings.workspace_root) or ended(), "the agent runs")
        assert not ended(), service.get_run(started.id).steps
        run = await service.cancel(started.id)
        assert run.status == "cancelled" and run.steps[0].status == "cancelled"
        assert agent_processes(settings.workspace_root) == []
    assert list(settings.workspace_root.rglob("home")) == []


def scripted_conductor(pool_dir: Path, steps: list[tuple[str, str, Any]]) -> None:
    """The agents pool with a conductor that always writes this workflow (litellm's mock_response)."""
    path = pool_dir / "agents.yaml"
    doc = yaml.safe_load(path.read_text())
    workflow = {"reasoning": "scripted", "steps": [{"worker": w, "instruction": i, "access": a} for w, i, a in steps]}
    mocked = {"mock_response": json.dumps(workflow)}
    doc["conductor"] = {"model": "openai/scripted", "params": mocked, "structured_output": "none"}
    path.write_text(yaml.safe_dump(doc))


async def test_the_viewer_shows_the_diff_escaped(settings: Settings, pool_dir: Path) -> None:
    agent_pool(pool_dir)
    xss = "sim-agent write page.html: <script>window.__xss=1</script>"
    run, _, _ = await run_workflow(settings, [Step(worker="writer", instruction=xss, access=[])])
    async with Service.open(settings) as service, serving(service) as client:
        page = (await client.get(f"/ui/runs/{run.id}", headers=BEARER)).text
    assert (
        "Diff (1 files, +1 -0 lines)" in page
        and '<span class="add">+&lt;script&gt;window.__xss=1&lt;/script&gt;' in page
    )
    assert "<script>window" not in page and "command line" in page


async def test_the_openai_door_takes_the_workspace_from_metadata_and_returns_the_patch(
    settings: Settings, pool_dir: Path, repo: Path, tmp_path: Path
) -> None:
    agent_pool(pool_dir)
    scripted_conductor(pool_dir, [("writer", "sim-agent write feature.py: print(1)", [])])
    async with Service.open(settings) as service, serving(service) as client:
        body = {"model": "conductor/agents", "input": "Add a feature.", "metadata": {"workspace": str(repo)}}
        done = (await client.post("/v1/responses", json=body, headers=BEARER)).json()
        elsewhere = {**body, "metadata": {"workspace": str(tmp_path)}}
        outside = await client.post("/v1/responses", json=elsewhere, headers=BEARER)
        chat = {"model": "conductor/agents", "messages": [{"role": "user", "content": "Add a feature."}]}
        chatted = (await client.post("/v1/chat/completions", json=chat, headers=BEARER)).json()
        stored = service.get_run(done["metadata"]["conductor_run_id"])
    patch = json.loads(done["metadata"]["conductor_patch"])
    assert done["status"] == "completed" and patch["files"] == ["feature.py"] and patch["lines_added"] == 1
    assert stored.workspace == str(repo)
    assert json.loads(chatted["conductor_patch"])["files_changed"] == 1  # the first root, by default
    assert outside.status_code == 400 and "workspace:" in outside.json()["error"]["message"]


async def test_a_tool_using_reviewer_reads_the_agents_result_in_a_workspace_built_on_it(
    settings: Settings, pool_dir: Path, repo: Path
) -> None:
    script = Script(
        [("read", {"path": "feature.py"}), ("run", {"command": "python3 feature.py && echo hi > mine.txt"})],
        final="Looks right.",
    )
    with ScriptedServer(script) as server:
        reviewer = {
            "id": "reviewer",
            "description": "reviews with tools",
            "model": "hosted_vllm/reviewer",
            "api_base": f"{server.base_url}/v1",
            "max_retries": 0,
            "tools": ["read", "run"],
            "sandbox": "read-only",
            "max_tool_turns": 4,
        }
        agent_pool(pool_dir)
        doc = yaml.safe_load((pool_dir / "agents.yaml").read_text())
        doc["workers"].append(reviewer)
        (pool_dir / "agents.yaml").write_text(yaml.safe_dump(doc))
        run, messages, _ = await run_workflow(
            settings,
            [
                Step(worker="writer", instruction="sim-agent write feature.py: print(6 * 7)", access=[]),
                Step(worker="reviewer", instruction="Review the change; run it.", access=[0]),
            ],
        )
    assert run.status == "done", run.error
    writer, review = run.steps
    assert review.work is not None and writer.work is not None
    assert review.work.base.parent == writer.work.base.id  # it started from the agent's result
    read, ran = review.work.tool_uses
    assert read.name == "read" and "print(6 * 7)" in read.output
    assert ran.output.startswith("exit status") and "42" in ran.output and "Read-only file system" in ran.output
    assert review.output and review.output.startswith("Looks right.") and review.work.diff.files == []
    assert "+print(6 * 7)" in messages["1"][0]["content"]  # it was shown the diff too


async def test_a_root_inside_the_repository_is_all_a_tool_using_model_sees(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    """CONDUCTOR_ROOTS is the repository's pkg folder: the workspace holds pkg only, so files above it, tracked
    (calc.py) or untracked (notes.txt), cannot be read or listed."""
    script = Script(
        [("read", {"path": "calc.py"}), ("read", {"path": "notes.txt"}), ("search", {"pattern": "def add"})],
        final="Nothing above pkg.",
    )
    with ScriptedServer(script) as server:
        doc = sim_pool_doc(name="agents", anonymize=False)
        reader = {"id": "reader", "description": "reads", "model": "hosted_vllm/reader", "max_retries": 0}
        reader |= {"api_base": f"{server.base_url}/v1", "tools": ["read", "search"]}
        doc["workers"] = [reader, *doc["workers"]]
        write_pool(pool_dir, doc)
        settings = Settings.from_env(
            state_dir=tmp_path / "state", workspace_dir=agent_root, roots=(repo / "pkg",)
        ).with_pool_dirs_first(pool_dir)
        run, _, _ = await run_workflow(settings, [Step(worker="reader", instruction="Look around.", access=[])])
    assert run.status == "done", run.error
    (step,) = run.steps
    assert step.work is not None
    calc, notes, search = step.work.tool_uses
    assert "does not exist" in calc.output and "does not exist" in notes.output and search.output == "no match"
    assert step.work.base.scope == "pkg" and step.work.base.subdir == "pkg"


async def test_an_agent_bounded_by_a_root_inside_the_repository_has_its_patch_applied(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    """The workspace's repository lies above the caller's root; `apply` checks the root it holds, and writes."""
    agent_pool(pool_dir)
    settings = Settings.from_env(
        state_dir=tmp_path / "state", workspace_dir=agent_root, roots=(repo / "pkg",)
    ).with_pool_dirs_first(pool_dir)
    run, _, _ = await run_workflow(settings, [Step(worker="writer", instruction="sim-agent write mul.py: 6 * 7")])
    assert run.status == "done", run.error
    assert run.steps[0].work is not None and run.steps[0].work.base.scope == "pkg"
    summary = await apply_final_patch(run, patch_summary(run), settings.file_roots)
    assert summary is not None and summary.applied == "applied", summary
    assert (repo / "pkg" / "mul.py").read_text() == "6 * 7\n"


def test_the_cli_runs_agents_on_the_workspace_it_names_and_prints_the_patch(
    pool_dir: Path, agent_root: Path, repo: Path, tmp_path: Path
) -> None:
    agent_pool(pool_dir)
    scripted_conductor(pool_dir, [("writer", "sim-agent write feature.py: print(1)", [])])
    roots = {"CONDUCTOR_WORKSPACE_DIR": str(agent_root), "CONDUCTOR_ROOTS": str(tmp_path)}
    env = {**os.environ, "CONDUCTOR_POOL_PATH": str(pool_dir), **roots}
    argv = [sys.executable, "-m", "conductor_mcp", "run", "--pool", "agents", "--quiet", "--workspace", str(repo)]
    done = subprocess.run([*argv, "Add a feature."], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"**Patch:** 1 files changed, +1 -0 lines, by step 0 against {repo}" in done.stdout
    outside = subprocess.run([*argv[:-1], "/", "Add a feature."], env=env, capture_output=True, text=True, timeout=120)
    assert outside.returncode != 0 and "workspace: '/' is outside the allowed roots" in outside.stderr


async def test_resumed_in_another_service_a_later_agent_starts_from_the_stored_patch(
    settings: Settings, pool_dir: Path, repo: Path
) -> None:
    agent_pool(pool_dir)
    steps = [
        Step(worker="writer", instruction="sim-agent write feature.py: print(1)", access=[]),
        Step(worker="second", instruction="sim-agent fail 3", access=[0]),
    ]
    failed, _, _ = await run_workflow(settings, steps)
    assert failed.status == "failed" and failed.steps[0].status == "done"
    doc = yaml.safe_load((pool_dir / "agents.yaml").read_text())  # the second agent is mended, the server restarted
    fixed = "import sys, pathlib; sys.stdin.read(); pathlib.Path('more.py').write_text('print(2)\\n'); print('wrote')"
    doc["workers"][1]["agent"]["command"] = [sys.executable, "-c", fixed]
    (pool_dir / "agents.yaml").write_text(yaml.safe_dump(doc))
    async with Service.open(settings) as service:
        resumed = await service.wait(service.continue_run(failed.id).id, None)
    assert resumed.status == "done", resumed.error
    first, second = (step.work for step in resumed.steps)
    assert first is not None and second is not None and second.diff is not None
    assert second.base.parent == first.base.id and second.root.tree == first.base.tree
    assert [f.path for f in second.diff.files] == ["more.py"]  # its own work, over the first one's result
    assert sorted(f.path for f in second.patch_files) == ["feature.py", "more.py"]


async def test_a_follow_ups_corrective_agent_starts_from_the_earlier_agents_result(
    settings: Settings, pool_dir: Path
) -> None:
    agent_pool(pool_dir)
    scripted_conductor(pool_dir, [("second", "sim-agent write more.py: print(2)", [])])
    steps = [Step(worker="writer", instruction="sim-agent write feature.py: print(1)", access=[])]
    async with Service.open(settings) as service:
        first = await service.wait(service.start(ask("Add a feature.", pool="agents"), Workflow(steps=steps)).id, None)
        follow = await service.wait(service.continue_run(first.id, "Also add more.py.").id, None)
    assert follow.status == "done", follow.error
    inherited, conductor, corrective = follow.steps
    assert inherited.work is not None and corrective.work is not None and corrective.parent == conductor.key
    assert corrective.work.base.parent == inherited.work.base.id  # built on the earlier agent's result
    assert [f.path for f in corrective.work.diff.files] == ["more.py"] if corrective.work.diff else False
    assert sorted(f.path for f in corrective.work.patch_files) == ["feature.py", "more.py"]
