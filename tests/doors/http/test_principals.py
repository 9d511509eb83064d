"""One principal per token, against a real `serve --http` process: tokens made with the CLI, then the MCP SDK
client over streamable HTTP, raw Tasks requests, the openai SDK against /v1 and a real HTTP client on the viewer.
Bob may not list, read, continue, cancel or stream Alice's runs (404, as for a run that does not exist); an admin
token and CONDUCTOR_HTTP_TOKEN see every run; a revoked token, and the viewer sessions signed in with it, are
refused from the next request on."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import INITIALIZE, MCP_ACCEPT, HttpServer, server_env, sim_pool_doc, write_pool
from tests.doors.mcp.test_tasks import HttpTasksClient

pytestmark = [pytest.mark.slow]

ADMIN = "principals-admin-token-0123456789-abcdefghijk"  # CONDUCTOR_HTTP_TOKEN: the local user, an admin
TASK = "What is 6 * 7? Explain step by step."
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL_TASK = 'Should I take an umbrella in Paris? Call get_weather {"city": "Paris"} first.'


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "tokens", *args],
        env=server_env(state),
        capture_output=True,
        text=True,
        timeout=120,
    )


class Team:
    """A server and the tokens of its principals."""

    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        self.tokens = {name: self.add(name, *flags) for name, *flags in (("alice",), ("bob",), ("ops", "--admin"))}
        self.tokens["local"] = ADMIN
        pools = root / "pools"
        pools.mkdir()
        slow = {name: {"first_token_s": 6000} for name in ("alpha", "beta", "gamma")}  # a minute at the scale below
        write_pool(pools, sim_pool_doc(name="slowsim", simulation={"workers": slow}))
        env = {
            "CONDUCTOR_POOL": "sim",
            "CONDUCTOR_HTTP_TOKEN": ADMIN,
            "CONDUCTOR_SIM_TIME_SCALE": "0.01",
            "CONDUCTOR_TASK_POLL_MS": "100",
        }
        self.server = HttpServer(self.state, pools, **env)
        self.base = f"http://127.0.0.1:{self.server.port}"

    def add(self, name: str, *flags: str) -> str:
        made = cli(self.state, "add", name, *flags)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def headers(self, who: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[who]}"}

    def openai(self, who: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=self.tokens[who], max_retries=0)

    def http(self, who: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers=self.headers(who) if who else {}, timeout=30)

    def tasks(self, who: str) -> HttpTasksClient:
        return HttpTasksClient(self.server.url, self.tokens[who])

    @asynccontextmanager
    async def mcp(self, who: str) -> AsyncIterator[Client]:
        import httpx2

        async with (
            httpx2.AsyncClient(headers=self.headers(who), timeout=30) as http_client,
            Client(streamable_http_client(self.server.url, http_client=http_client)) as client,
        ):
            yield client


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    started = Team(tmp_path_factory.mktemp("principals"))
    yield started
    started.server.stop()


def response_run(response: Any) -> str:
    assert response.metadata is not None
    return response.metadata["conductor_run_id"]


# ------------------------------------------------------------------------------------------- the CLI and file


def test_tokens_are_printed_once_and_kept_hashed_in_a_private_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    made = cli(state, "add", "carol")
    assert made.returncode == 0 and "shown this once" in made.stderr
    token = made.stdout.strip()
    assert token.startswith("cmcp_") and len(token) > 40 and "\n" not in token
    admin = cli(state, "add", "dave", "--admin").stdout.strip()
    path = state / "tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    secret, admin_secret = token.removeprefix("cmcp_"), admin.removeprefix("cmcp_")
    assert secret not in text and admin_secret not in text and secret[:12] not in text
    assert {(e["name"], e["admin"]) for e in json.loads(text)["tokens"]} == {("carol", False), ("dave", True)}

    listed = cli(state, "list")
    assert listed.returncode == 0 and token not in listed.stdout and secret[:12] not in listed.stdout
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("carol", "user"), ("dave", "admin")] and all(len(r) == 3 for r in rows)

    again = cli(state, "add", "carol")
    assert again.returncode == 2 and "exists" in again.stderr and again.stdout == ""
    for bad in ("local", "Carol", "a.b", "_x", "x" * 33):
        refused = cli(state, "add", bad)
        assert refused.returncode == 2 and "name:" in refused.stderr, bad
    assert cli(state, "revoke", "carol").returncode == 0
    assert [line.split()[0] for line in cli(state, "list").stdout.splitlines()] == ["dave"]
    missing = cli(state, "revoke", "carol")
    assert missing.returncode == 2 and "no token named 'carol'" in missing.stderr
    assert not list(state.glob(".tokens.json.*[0-9a-f]"))  # no draft left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# ---------------------------------------------------------------------------------------------------- MCP


async def test_mcp_tools_and_resources_show_a_principal_its_own_runs_only(team: Team) -> None:
    async with team.mcp("alice") as alice:
        done = await alice.call_tool("orchestrate", {"task": TASK, "pool": "sim", "wait_seconds": 60})
        run_id = done.structured_content["run_id"]
        assert done.structured_content["status"] == "done"
        mine = await alice.call_tool("runs", {"limit": 50})
        assert run_id in {r["run_id"] for r in mine.structured_content["runs"]}
        record = json.loads((await alice.read_resource(f"conductor://runs/{run_id}")).contents[0].text)
        assert record["principal"] == "alice"
    async with team.mcp("bob") as bob:
        listed = await bob.call_tool("runs", {"limit": 50})
        assert run_id not in {r["run_id"] for r in listed.structured_content["runs"]}
        for feedback in (None, "Shorter."):
            arguments = {"run_id": run_id, "wait_seconds": 0, **({"feedback": feedback} if feedback else {})}
            refused = await bob.call_tool("continue_workflow", arguments)
            assert refused.is_error and f"no run with id {run_id!r}" in refused.content[0].text
        for uri in (f"conductor://runs/{run_id}", f"conductor://runs/{run_id}/steps/0"):
            with pytest.raises(MCPError, match="no run with id"):
                await bob.read_resource(uri)
        with pytest.raises(MCPError, match="no run with id"):
            await bob.get_prompt("review_run", {"run_id": run_id})
        bob_plan = await bob.call_tool("plan", {"task": TASK, "pool": "sim"})
        bobs = bob_plan.structured_content["run_id"]
    for admin in ("ops", "local"):
        async with team.mcp(admin) as client:
            every = await client.call_tool("runs", {"limit": 50})
            assert {run_id, bobs} <= {r["run_id"] for r in every.structured_content["runs"]}
            assert (
                json.loads((await client.read_resource(f"conductor://runs/{run_id}")).contents[0].text)["id"] == run_id
            )
    async with team.mcp("alice") as alice:  # the follow-up of Alice's run is hers; Bob's plan is not
        again = {"run_id": run_id, "feedback": "Shorter.", "wait_seconds": 60}
        follow_up = await alice.call_tool("continue_workflow", again)
        assert follow_up.structured_content["parent_run_id"] == run_id
        assert (await alice.call_tool("continue_workflow", {"run_id": bobs, "wait_seconds": 0})).is_error


def test_an_mcp_session_answers_only_the_principal_that_opened_it(team: Team) -> None:
    """The SDK binds a session to the principal of the AccessToken that opened it (doors/http/principals.py)."""
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with team.http("alice") as alice, team.http("bob") as bob:
        opened = alice.post("/mcp", json=INITIALIZE, headers=MCP_ACCEPT)
        assert opened.status_code == 200
        session = {**MCP_ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"]}
        assert bob.post("/mcp", json=listing, headers=session).status_code == 404
        assert alice.post("/mcp", json=listing, headers=session).status_code == 200


def test_tasks_of_another_principal_are_unknown_and_cannot_be_cancelled(team: Team) -> None:
    alice, bob, ops = team.tasks("alice"), team.tasks("bob"), team.tasks("ops")
    try:
        created = alice.request("tools/call", {"name": "orchestrate", "arguments": {"task": TASK, "pool": "slowsim"}})
        task_id = created["taskId"]
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            answer = bob.send(method, {"taskId": task_id})
            assert answer["error"]["code"] == -32602 and f"no task {task_id!r}" in answer["error"]["message"], method
        assert alice.request("tasks/get", {"taskId": task_id})["status"] == "working"  # Bob's cancel did nothing
        assert ops.request("tasks/cancel", {"taskId": task_id})["resultType"] == "complete"  # an admin may
        assert alice.poll(task_id)[-1]["status"] == "cancelled"
    finally:
        for client in (alice, bob, ops):
            client.http.close()


# ----------------------------------------------------------------------------------------------- /v1


def test_v1_runs_previous_responses_and_call_ids_are_the_principals_own(team: Team) -> None:
    alice, bob = team.openai("alice"), team.openai("bob")
    first = alice.responses.create(model="conductor/sim", input=TOOL_TASK, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    run_id = response_run(first)
    call = next(item for item in first.output if item.type == "function_call")
    with team.http("bob") as raw:
        assert raw.get(f"/v1/runs/{run_id}").status_code == 404
        with pytest.raises(openai.NotFoundError):
            bob.responses.create(model="conductor/sim", input="Go on.", previous_response_id=first.id)
        output = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
        with pytest.raises(openai.NotFoundError):  # Codex's way: the call id names the run
            bob.responses.create(model="conductor/sim", input=output, tools=[WEATHER_TOOL])  # type: ignore[arg-type,list-item]
        with pytest.raises(openai.NotFoundError):
            bob.responses.create(
                model="conductor/sim",
                input=output,
                tools=[WEATHER_TOOL],
                previous_response_id=first.id,  # type: ignore[arg-type,list-item]
            )
        messages = [
            {"role": "user", "content": TOOL_TASK},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
        ]
        with pytest.raises(openai.NotFoundError):
            bob.chat.completions.create(model="conductor/sim", messages=messages)  # type: ignore[arg-type]
    with team.http("alice") as raw:
        stored = raw.get(f"/v1/runs/{run_id}").json()
    assert stored["principal"] == "alice"
    with team.http("ops") as raw:
        assert raw.get(f"/v1/runs/{run_id}").status_code == 200
    second = alice.responses.create(
        model="conductor/sim",
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],  # type: ignore[list-item]
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert response_run(second) == run_id and "Tool result: sunny" in second.output_text


# -------------------------------------------------------------------------------------------- the viewer


def test_the_viewer_shows_a_principal_its_own_runs_and_ends_revoked_sessions(team: Team) -> None:
    alice = team.openai("alice")
    run_id = response_run(alice.responses.create(model="conductor/sim", input=TASK))
    carol = team.add("carol")
    team.tokens["carol"] = carol
    with team.http() as browser:
        signed_in = browser.post("/ui/login", data={"token": carol, "next": "/ui/"})
        assert signed_in.status_code == 303
        cookie = signed_in.headers["set-cookie"].split(";")[0]
    for who, headers in (("bob", team.headers("bob")), ("carol", {"cookie": cookie})):
        with team.http() as client:
            listing = client.get("/ui/", headers=headers)
            assert listing.status_code == 200 and run_id not in listing.text, who
            for path in (
                f"/ui/runs/{run_id}",
                f"/ui/runs/{run_id}?part=body",
                f"/ui/runs/{run_id}/events",
                f"/ui/runs/{run_id}/steps/0/messages",
            ):
                assert client.get(path, headers=headers).status_code == 404, (who, path)
    with team.http("alice") as client:
        assert run_id in client.get("/ui/").text
        assert client.get(f"/ui/runs/{run_id}").status_code == 200
        assert client.get(f"/ui/runs/{run_id}/steps/0/messages").status_code == 200
        code = client.post("/ui/login-codes").json()["url"]
    with team.http() as browser:  # a login code is for the principal that asked for it
        via_code = browser.get(code, follow_redirects=False)
        alices_cookie = via_code.headers["set-cookie"].split(";")[0]
        assert browser.get(f"/ui/runs/{run_id}", headers={"cookie": alices_cookie}).status_code == 200
    for admin in ("ops", "local"):
        with team.http(admin) as client:
            assert run_id in client.get("/ui/").text and client.get(f"/ui/runs/{run_id}").status_code == 200

    assert cli(team.state, "revoke", "carol").returncode == 0
    with team.http() as client:
        assert client.get("/ui/", headers={"cookie": cookie}).status_code == 401  # the session ended with the token
        assert client.get("/v1/models", headers={"authorization": f"Bearer {carol}"}).status_code == 401
    with team.http("bob") as client:
        assert client.get("/v1/models").status_code == 200  # the others go on


def form_session(team: Team, token: str) -> str:
    """The cookie of a viewer session signed in by posting `token` in the sign-in form."""
    with team.http() as browser:
        signed_in = browser.post("/ui/login", data={"token": token, "next": "/ui/"})
        assert signed_in.status_code == 303, signed_in.text
        return signed_in.headers["set-cookie"].split(";")[0]


def test_a_session_ends_with_its_token_though_the_name_is_added_again(team: Team) -> None:
    run_id = response_run(team.openai("alice").responses.create(model="conductor/sim", input=TASK))
    dave = team.tokens["dave"] = team.add("dave")
    cookie = form_session(team, dave)
    with team.http("dave") as client:
        code = client.post("/ui/login-codes").json()["url"]  # minted with dave's token, redeemed below
    with team.http() as browser:
        assert browser.get("/ui/", headers={"cookie": cookie}).status_code == 200
        assert browser.get(f"/ui/runs/{run_id}", headers={"cookie": cookie}).status_code == 404
    assert cli(team.state, "revoke", "dave").returncode == 0
    again = team.add("dave", "--admin")  # the same name, a new token: an admin's
    with team.http() as browser:
        assert browser.get("/ui/", headers={"cookie": cookie}).status_code == 401
        assert browser.get(f"/ui/runs/{run_id}", headers={"cookie": cookie}).status_code == 401
        redeemed = browser.get(code, follow_redirects=False)
        assert redeemed.status_code == 403 and "set-cookie" not in redeemed.headers  # its token is gone
    admin_cookie = form_session(team, again)  # the new token signs in, as the admin it now is
    with team.http() as browser:
        assert browser.get(f"/ui/runs/{run_id}", headers={"cookie": admin_cookie}).status_code == 200
        assert browser.get("/ui/", headers={"cookie": cookie}).status_code == 401  # the old session stays ended


def test_a_session_cannot_mint_login_codes_so_sign_out_ends_it(team: Team) -> None:
    erin = team.tokens["erin"] = team.add("erin")
    cookie = form_session(team, erin)
    with team.http() as browser:
        minted = browser.post("/ui/login-codes", headers={"cookie": cookie})
        assert minted.status_code == 401 and "needs the token" in minted.json()["error"]
        wrong = browser.post("/ui/login-codes", headers={"cookie": cookie, "authorization": "Bearer cmcp_wrong"})
        assert wrong.status_code == 401
        assert browser.post("/ui/logout", headers={"cookie": cookie}).status_code == 200
        assert browser.get("/ui/", headers={"cookie": cookie}).status_code == 401
    with team.http("erin") as client:  # the token itself still mints one, for erin
        code = client.post("/ui/login-codes").json()["url"]
    with team.http() as browser:
        assert browser.get(code, follow_redirects=False).status_code == 303


def test_a_live_run_streams_to_its_principal_only(team: Team) -> None:
    body = {"model": "conductor/slowsim", "input": TASK, "stream": True}
    with team.http("alice") as alice:
        with alice.stream("POST", "/v1/responses", json=body) as started:
            assert started.status_code == 200
            run_id = started.headers["x-conductor-run-id"]  # then the client goes away: the run goes on
        with alice.stream("GET", f"/ui/runs/{run_id}/events") as events:
            assert events.status_code == 200 and next(events.iter_lines()).startswith("event: progress")
        assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "running"
    with team.http("bob") as bob:
        assert bob.get(f"/ui/runs/{run_id}/events").status_code == 404
        assert bob.get(f"/ui/runs/{run_id}").status_code == 404
    bob_tasks, admin = team.tasks("bob"), team.tasks("local")
    try:
        assert bob_tasks.send("tasks/cancel", {"taskId": run_id})["error"]["code"] == -32602
        assert admin.request("tasks/get", {"taskId": run_id})["status"] == "working"
        admin.request("tasks/cancel", {"taskId": run_id})
        assert admin.poll(run_id)[-1]["status"] == "cancelled"
    finally:
        bob_tasks.http.close()
        admin.http.close()
