"""The embedded default against the real thing: Gemma 3 270M served by llama.cpp (xllamacpp) on loopback.

Needs the `local` extra (CI installs it); skipped elsewhere when it is not installed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from mcp import StdioServerParameters
from mcp.client import Client

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core.prompts import worker_messages
from conductor_mcp.core.workflow import Step, Workflow, workflow_json_schema
from conductor_mcp.models import local, local_slots
from conductor_mcp.models.completion import completion_prompt
from conductor_mcp.models.providers import Providers
from conductor_mcp.service.catalogue import load_pool
from conductor_mcp.service.service import Service
from tests.conftest import HttpServer, orchestrate, plan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(
        not local.server_available() and not os.environ.get("CI"), reason="the local extra is not installed"
    ),
]


@pytest.fixture(scope="module")
def shared_state(tmp_path_factory: pytest.TempPathFactory):
    """One resident model server for the module; every test and subprocess finds it in this state dir."""
    state = tmp_path_factory.mktemp("local-state")
    registry = local.LocalServers(state)
    running = registry.up(local.DEFAULT_MODEL)
    yield state, running
    registry.down(local.DEFAULT_MODEL)


@pytest.fixture
def state(shared_state, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONDUCTOR_STATE_DIR", str(shared_state[0]))
    monkeypatch.setenv("CONDUCTOR_POOL", "local")
    return shared_state[0]


async def test_managed_server_starts_serves_and_stops(tmp_path: Path) -> None:
    registry = local.LocalServers(tmp_path)
    url = await registry.ensure(local.DEFAULT_MODEL)
    assert local.healthy(url)
    assert await registry.ensure(local.DEFAULT_MODEL) == url  # reused, not restarted
    registry.stop_managed()
    assert not local.healthy(url, timeout_s=1.0)


async def test_resident_server_is_reused(state: Path, shared_state) -> None:
    assert await local.LocalServers(state).ensure(local.DEFAULT_MODEL) == shared_state[1].base_url


def test_resident_server_files_are_private(state: Path) -> None:
    """The server's port, pid and log (which may quote prompts) and its saved slots (their KV cache) are readable
    by their owner only."""
    files = [p for p in (state / "local").iterdir() if p.is_file()]
    assert {p.suffix for p in files} == {".json", ".log"}
    directories = [state, state / "local", state / "local" / "slots"]
    assert {stat.S_IMODE(d.stat().st_mode) for d in directories} == {0o700}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}


async def _evaluated(state: Path, task: str, registry: local.LocalServers) -> tuple[float, float]:
    """One run of `task` on the local pool, its servers `registry`'s: the prompt tokens llama.cpp evaluated during
    it (read from its /metrics), and the prompt tokens the run's calls sent."""
    running = registry.running(local.DEFAULT_MODEL)
    before = (local_slots.counters(running.root) if running else None) or {}
    async with Service.open(Settings.from_env(state_dir=state), local_servers=registry) as service:
        run = await orchestrate(service, task, pool="local")
        running = registry.running(local.DEFAULT_MODEL)  # read before closing stops a server the run started
        after = local_slots.counters(running.root) if running else None
    assert run.status == "done", run.error
    assert after is not None, "the server serves no llama.cpp counters"
    sent = sum(c.prompt_tokens for c in run.conductor_calls) + sum(s.prompt_tokens for s in run.steps)
    return after["prompt_tokens_total"] - before.get("prompt_tokens_total", 0.0), sent


async def test_a_second_run_on_a_resident_server_evaluates_only_the_tasks_tokens(tmp_path: Path) -> None:
    """The conductor's prompt opens with the pool's byte-identical prefix (~240 tokens of ~270): against a
    resident server, a second run with another task evaluates little more than its own task's tokens."""
    registry = local.LocalServers(tmp_path)
    registry.up(local.DEFAULT_MODEL)
    try:
        first, sent = await _evaluated(tmp_path, "What is the capital of France?", registry)
        second, _ = await _evaluated(tmp_path, "Name the largest planet.", registry)
    finally:
        registry.down(local.DEFAULT_MODEL)
    assert first > 200 and second < first / 2, (first, second, sent)


async def test_a_new_server_starts_with_the_conductors_prefix_restored(tmp_path: Path) -> None:
    """The conductor's slot is saved when a server stops and restored when the next starts: a cold run (the
    command starts the server) after another evaluates the prefix no more."""
    registry = local.LocalServers(tmp_path)
    first, _ = await _evaluated(tmp_path, "What is the capital of France?", registry)  # closing stops its server
    second, _ = await _evaluated(tmp_path, "Name the largest planet.", registry)
    assert list((tmp_path / "local" / "slots").iterdir()) == [
        tmp_path / "local" / "slots" / registry.slot_file(local.DEFAULT_MODEL)
    ]
    assert first > 200 and second < first / 2, (first, second)


async def test_plan_with_constrained_decoding(state: Path) -> None:
    async with Service.open(Settings.from_env()) as service:
        run = await plan(service, "What is the capital of France?")
    assert run.pool == "local" and run.fallback_reason is None, run.conductor_calls
    call = run.conductor_calls[-1]
    pool = load_pool("local", [builtin_pool_dir()])
    schema = workflow_json_schema(pool.visible_ids(), run.max_steps, pool.conductor.max_text_chars)
    jsonschema.validate(json.loads(call.raw_output), schema)  # the grammar held: valid by construction
    assert call.prompt_tokens > 100 and call.completion_tokens > 5  # real counts from the server


async def test_orchestrate_end_to_end(state: Path) -> None:
    async with Service.open(Settings.from_env()) as service:
        run = await orchestrate(service, "What is the capital of France?")
    assert run.status == "done", run.error
    assert run.answer, run.answer  # an empty answer is a failed draw, asked again, never a run done
    for step in run.steps:
        assert step.answered_by == "local/gemma3-270m"
        assert step.prompt_tokens > 10 and step.completion_tokens >= 1


async def test_mcp_server_over_stdio_on_the_local_pool(state: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=dict(os.environ))
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"task": "Name a primary colour.", "wait_seconds": 120})
    assert result.structured_content["status"] == "done" and result.structured_content["pool"] == "local"


def _raw_completion(base_url: str, prompt: str) -> str:
    """What the model writes for a prompt with no stop sequence: how far a base model goes past its answer."""
    body = {"model": local.DEFAULT_MODEL, "prompt": prompt, "max_tokens": 96, "temperature": 0.0}
    request = urllib.request.Request(
        f"{base_url}/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["text"]


async def test_a_base_models_answer_ends_where_the_answer_ends(state: Path, shared_state) -> None:
    """Left alone the model answers, then writes the next question or the next step ("Step 1: answer:") until
    max_tokens; a completion-style worker gets the sentence and nothing else, alone and after a seen step."""
    answerer = load_pool("local", [builtin_pool_dir()]).get("answerer")
    answerer = answerer.model_copy(update={"params": {**answerer.params, "temperature": 0.0}})
    workflow = Workflow(
        steps=[
            Step(worker="answerer", instruction="Answer the question and state the final answer.", access=[]),
            Step(worker="answerer", instruction="Check the answer above and state the final answer.", access=[0]),
        ]
    )
    providers = Providers(Settings.from_env())
    try:
        for index, outputs in ((0, {}), (1, {0: "The capital of France is Paris."})):
            messages = worker_messages("What is the capital of France?", None, workflow, index, outputs)
            raw = _raw_completion(shared_state[1].base_url, completion_prompt(messages)).strip()
            answer = (await providers.complete(answerer, messages)).text
            assert "Paris" in answer and "\n" not in answer and len(answer) < 80, answer
            assert raw.startswith(answer) and len(raw) > 3 * len(answer), raw  # the model itself did not stop there
    finally:
        await providers.aclose()


async def test_the_pools_seed_reaches_the_model_so_a_question_gets_one_answer(state: Path, shared_state) -> None:
    """The local pool's workers draw from a seed (pool_configs/local.yaml): even at a temperature where unseeded
    draws wander, the same question gets the same answer, so the README's run answers as it did before."""
    answerer = load_pool("local", [builtin_pool_dir()]).get("answerer")
    assert answerer.params.get("seed") is not None
    hot = answerer.model_copy(update={"params": {**answerer.params, "temperature": 1.5}})
    workflow = Workflow(steps=[Step(worker="answerer", instruction="Answer the question.", access=[])])
    messages = worker_messages("Name three rivers.", None, workflow, 0, {})
    providers = Providers(Settings.from_env())
    try:
        answers = {(await providers.complete(hot, messages)).text for _ in range(3)}
    finally:
        await providers.aclose()
    assert len(answers) == 1, answers


def conductor(
    *args: str, python_flags: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`conductor-mcp ARGS` as a user runs it, in a new process; it must succeed."""
    command = [sys.executable, *python_flags, "-m", "conductor_mcp", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-1000:] + result.stderr[-2000:]
    return result


def test_cli_default_needs_no_keys(state: Path) -> None:
    """README command 1 on a machine with no keys: the local pool, one step, the sentence and the time it took."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CONDUCTOR_POOL"}
    result = conductor("run", "--json", "What is the capital of France?", env=env)
    run = json.loads(result.stdout)
    assert run["pool"] == "local" and run["status"] == "done" and len(run["steps"]) == 1
    assert run["totals"]["total_tokens"] > 0
    assert "Paris" in run["answer"] and "\n" not in run["answer"], run["answer"]
    assert "first answer after" in result.stderr and "Unclosed client session" not in result.stderr


def test_a_run_on_the_local_pool_never_imports_litellm(state: Path) -> None:
    """litellm costs ~3 s of CPU to import on a 2-core machine, more than the embedded model's whole answer on a
    resident server: `run` on the local pool must not load it, nor the openai SDK (its exceptions' base)."""
    result = conductor("run", "--quiet", "What is the capital of France?", python_flags=("-X", "importtime"))
    assert "Paris" in result.stdout
    imported = {
        line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    assert "conductor_mcp.models.local_backend" in imported  # the run did reach the embedded model's backend
    assert {name.split(".")[0] for name in imported} & {"litellm", "openai"} == set()


def test_verbose_says_where_the_time_went_in_the_model_s_own_tokens(state: Path) -> None:
    """`run --verbose`: llama.cpp's own counts of the run's prompt tokens (evaluated and cached) and generated
    tokens, with their rates on this CPU, agree with the run's usage; our own share and CPU are beside them."""
    result = conductor("run", "--quiet", "--verbose", "--json", "What is 2 + 2?")
    totals = json.loads(result.stdout[: result.stdout.rindex("}") + 1])["totals"]
    prompt = re.search(r"prompt tokens +[\d.]+ +(\d+) evaluated(?: at \d+/s)?, (\d+) cached", result.stderr)
    generated = re.search(r"generated tokens +([\d.]+) +(\d+) tokens at (\d+)/s", result.stderr)
    assert prompt and generated, result.stderr[-2000:]
    assert int(prompt[1]) + int(prompt[2]) == totals["prompt_tokens"]
    assert int(generated[2]) == totals["completion_tokens"] and int(generated[3]) > 0
    assert re.search(r"the rest of the run +[\d.]+ +ours", result.stderr)
    assert re.search(r"CPU: this process [\d.]+ s, model server [\d.]+ s", result.stderr)


HASHES = """
import sys
from pathlib import Path
from conductor_mcp.models import local
hashed = []
sys.setprofile(lambda frame, event, _: event == "call" and frame.f_code.co_name == "_sha256_file" and hashed.append(1))
name = local.LocalServers(Path(sys.argv[1])).slot_file(local.DEFAULT_MODEL)
sys.setprofile(None)
print(len(hashed), name)
"""


def test_the_model_file_is_hashed_once_not_on_every_cold_start(tmp_path: Path) -> None:
    """The registry package hashes the 253 MB model on every call; a new process (each cold run) trusts the file
    its state directory saw verified while its size and mtime are unchanged, and hashes it again once they are not."""

    def hashes() -> tuple[int, str]:
        command = [sys.executable, "-c", HASHES, str(tmp_path)]
        probe = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr[-2000:]
        count, name = probe.stdout.split()
        return int(count), name

    first, second = hashes(), hashes()
    assert first[0] == 1 and second == (0, first[1])
    stamp = tmp_path / "local" / f"{local.DEFAULT_MODEL}.verified.json"
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "mtime_ns": 1}))  # as if the file had changed
    assert hashes() == (1, first[1])


def test_doctor_smoke_tests_the_embedded_model(state: Path) -> None:
    result = conductor("doctor")
    assert f"embedded model {local.DEFAULT_MODEL}: answered 1 token" in result.stdout


def test_openai_door_on_the_local_pool(state: Path) -> None:
    """A real model end to end through the OpenAI-compatible door (the openai SDK against `serve --http`)."""
    import openai

    server = HttpServer(state, None, CONDUCTOR_POOL="local")
    try:
        token = server.token_file.read_text().strip()  # private by default: the token the server generated
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0)
        response = client.responses.create(model="conductor/local", input="Name a primary colour.", timeout=300)
    finally:
        server.stop()
    assert response.status == "completed" and response.output_text
    assert response.usage is not None and response.usage.total_tokens > 0
