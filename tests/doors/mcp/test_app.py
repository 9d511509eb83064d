"""The run view as an MCP App, as a host renders it: headless chromium loads a small host page that embeds the app
in a sandboxed iframe (`sandbox="allow-scripts"`), speaks the app bridge (postMessage JSON-RPC) and forwards the
app's `tools/call` and `resources/read` to a real `conductor-mcp serve` over stdio through the MCP SDK client.

The run: a command agent (the simulator's, under bubblewrap) writes a file, then a model worker that answers only
when the test opens its gate reviews it. The app must draw the graph, move its timeline on while the run runs,
show the agent's diff and what each step saw, cancel the run, continue it, apply its patch, and leave every
script-like payload (in the task, the instructions, the diff and the answer) inert. Clients that do not negotiate
the extension see none of it (SEP-2133)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.extension import advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from conductor_mcp.doors.mcp.app import APP_ONLY_TOOLS, APP_URI
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.models import sim_agent
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.agents.conftest import needs_bwrap
from tests.agents.repos import caller_repo
from tests.conftest import HttpServer, headless_chromium, scripted_pool, server_env
from tests.doors.viewer.test_viewer_browser import XSS
from tests.doors.viewer.test_viewer_markdown import EVIL, MARKDOWN
from tests.faulty_server import completion

MODES = ["auto", "legacy"]
APPS = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})
WAIT_S = 120  # the machine is shared and loaded: generous, and every wait ends on an event
HOST_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>test host</title></head>
<body><h1>test host</h1><script>
"use strict";
// A minimal MCP Apps host: the tool's ui:// resource in a sandboxed iframe, the bridge, the tool call.
const CALL = __CALL__;
window.appCalls = [];
async function rpc(method, params) {
  const response = await fetch("/rpc", { method: "POST", body: JSON.stringify({ method, params }) });
  const body = await response.json();
  if (body.error) throw body.error;
  return body.result;
}
(async () => {
  const tools = (await rpc("tools/list", {})).tools;
  const tool = tools.find((t) => t.name === CALL.name);
  const ui = (t) => (t._meta && t._meta.ui) || {};
  const visibility = Object.fromEntries(tools.map((t) => [t.name, ui(t).visibility || ["model", "app"]]));
  const resource = (await rpc("resources/read", { uri: tool._meta.ui.resourceUri })).contents[0];
  if (resource.mimeType !== "text/html;profile=mcp-app") throw new Error("not an app");
  const frame = document.createElement("iframe");
  frame.id = "app";
  frame.setAttribute("sandbox", "allow-scripts");
  frame.width = "1180";
  frame.height = "700";
  frame.srcdoc = resource.text;
  const send = (message) => frame.contentWindow.postMessage({ jsonrpc: "2.0", ...message }, "*");
  window.addEventListener("message", async (event) => {
    if (event.source !== frame.contentWindow) return;
    const m = event.data;
    if (m.method === "ui/initialize") {
      send({ id: m.id, result: { protocolVersion: "2026-01-26", hostInfo: { name: "test-host", version: "1" },
        hostCapabilities: { serverTools: {}, serverResources: {} },
        hostContext: { theme: "light", displayMode: "inline", toolInfo: { tool } } } });
    } else if (m.method === "ui/notifications/initialized") {
      send({ method: "ui/notifications/tool-input", params: { arguments: CALL.arguments } });
      const result = await rpc("tools/call", CALL);
      send({ method: "ui/notifications/tool-result", params: result });
    } else if (m.method === "ui/notifications/size-changed") {
      frame.height = String(Math.min(m.params.height + 4, 1500));
    } else if (m.method === "tools/call" || m.method === "resources/read") {
      window.appCalls.push(m.method === "tools/call" ? m.params.name : m.params.uri);
      if (m.method === "tools/call" && !(visibility[m.params.name] || []).includes("app")) {
        send({ id: m.id, error: { code: -32602, message: "not callable by apps" } });
        return;
      }
      try { send({ id: m.id, result: await rpc(m.method, m.params) }); }
      catch (error) { send({ id: m.id, error }); }
    } else if (m.id !== undefined) {
      send({ id: m.id, error: { code: -32601, message: "not served by this host" } });
    }
  });
  document.body.append(frame);
})();
</script></body></html>"""


class AppHost:
    """The host's side in a thread of its own (Selenium blocks the test's): an MCP SDK client of `serve` over
    stdio that negotiated Apps, the host page and its bridge endpoint, and a model server whose `held` model
    answers only once `release` is called."""

    def __init__(self, server: StdioServerParameters, call: dict[str, Any], answer: str) -> None:
        self.server, self.call, self.answer = server, call, answer
        self.sock = socket.create_server(("127.0.0.1", 0))  # bound now: the pool names the model server's port
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    def __enter__(self) -> AppHost:
        self.thread.start()
        assert self.ready.wait(WAIT_S), "the test host did not start"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the test host did not stop"

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.set)

    async def _serve(self) -> None:
        import uvicorn

        self.loop = asyncio.get_running_loop()
        self.gate, self.stopping = asyncio.Event(), asyncio.Event()
        try:
            async with Client(self.server, mode="legacy", extensions=[APPS]) as client:
                self.client = client
                config = uvicorn.Config(self._app(), log_level="warning", timeout_graceful_shutdown=5)
                web = uvicorn.Server(config)
                serving = asyncio.create_task(web.serve(sockets=[self.sock]))  # bound already: no wait for it
                self.ready.set()
                await self.stopping.wait()
                self.gate.set()
                web.should_exit = True
                await serving
        except BaseException as exc:
            self.failure = exc
            self.ready.set()
            raise

    def _app(self) -> Starlette:
        page = HOST_PAGE.replace("__CALL__", json.dumps(self.call).replace("</", "<\\/"))  # the task holds </script>

        async def host_page(_: Request) -> Response:
            return HTMLResponse(page)

        async def rpc(request: Request) -> Response:
            body = await request.json()
            method, params = body["method"], body.get("params") or {}
            try:
                if method == "tools/list":
                    result: Any = await self.client.list_tools()
                elif method == "tools/call":
                    result = await self.client.call_tool(params["name"], params.get("arguments") or {})
                elif method == "resources/read":
                    result = await self.client.read_resource(params["uri"])
                else:
                    return JSONResponse({"error": {"code": -32601, "message": f"{method} is not forwarded"}})
            except MCPError as exc:
                return JSONResponse({"error": {"code": exc.error.code, "message": exc.error.message}})
            return JSONResponse({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)})

        async def held_model(request: Request) -> Response:
            model = (await request.json())["model"]
            await self.gate.wait()
            return completion(model, self.answer)

        routes = [
            Route("/", host_page),
            Route("/rpc", rpc, methods=["POST"]),
            Route("/v1/chat/completions", held_model, methods=["POST"]),
        ]
        return Starlette(routes=routes)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 1600)
    yield driver
    driver.quit()


@pytest.fixture
def agent_root() -> Iterator[Path]:
    root = Path.home() / ".cache" / f"conductor-app-tests-{secrets.token_hex(4)}"  # not /tmp: bwrap hides it
    yield root
    shutil.rmtree(root, ignore_errors=True)


def app_pool(pool_dir: Path, model_port: int) -> None:
    writer = {
        "id": "writer",
        "description": "a command agent",
        "sandbox": "workspace-write",
        "timeout_s": 60,
        "agent": {"cli": "command", "command": [sys.executable, sim_agent.__file__]},
    }
    reviewer = {
        "id": "reviewer",
        "model": "hosted_vllm/held",
        "api_base": f"http://127.0.0.1:{model_port}/v1",
        "description": "answers once the test lets it",
        "max_retries": 0,
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    steps = [("writer", f"sim-agent write notes.md: {XSS}", []), ("reviewer", f"Review the change. {XSS}", [0])]
    scripted_pool(pool_dir, "app", steps, anonymize=False, workers=[writer, reviewer], simulation=None)


def in_app(browser: Any, script: str) -> Any:
    """Run `script` (a function body) in the app's frame."""
    browser.switch_to.default_content()
    browser.switch_to.frame("app")
    return browser.execute_script(script)


def wait_in_app(browser: Any, script: str, what: str) -> Any:
    from selenium.common.exceptions import NoSuchFrameException, TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    waiting = WebDriverWait(browser, WAIT_S, ignored_exceptions=(NoSuchFrameException,))  # the host adds the frame
    try:
        return waiting.until(lambda b: in_app(b, script), message=what)
    except TimeoutException:
        browser.switch_to.default_content()
        calls = browser.execute_script("return window.appCalls;")
        shown = in_app(browser, "return document.body.innerText;") if calls is not None else None
        raise AssertionError(f"timed out waiting for {what}; the app called {calls} and showed {shown}") from None


def shot(browser: Any, directory: Path, name: str) -> None:
    """A screenshot of the host page with the app in it (CONDUCTOR_APP_SCREENSHOTS: where the docs' are made)."""
    browser.switch_to.default_content()
    path = directory / name
    browser.save_screenshot(str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def wait_status(browser: Any, status: str) -> None:
    wait_in_app(browser, f"return document.getElementById('status').textContent == {status!r};", f"the run {status}")


@needs_bwrap
@pytest.mark.slow
def test_the_run_view_in_a_host_follows_cancels_continues_and_applies_a_run(
    browser: Any, tmp_path: Path, pool_dir: Path, agent_root: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    shots = Path(os.environ.get("CONDUCTOR_APP_SCREENSHOTS") or tmp_path)
    repo = caller_repo(tmp_path / "caller")
    env = server_env(
        tmp_path / "state",
        CONDUCTOR_POOL_PATH=str(pool_dir),
        CONDUCTOR_WORKSPACE_DIR=str(agent_root),
        CONDUCTOR_ROOTS=str(repo),
    )
    params = StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=env)
    call = {"name": "orchestrate", "arguments": {"task": f"Write notes. {XSS}", "pool": "app", "wait_seconds": 0}}
    host = AppHost(params, call, answer=MARKDOWN + EVIL + XSS)
    app_pool(pool_dir, host.port)
    with host:
        browser.get(host.url)
        # the agent's step is done and the held reviewer runs: the graph and a timeline of two rows, live
        wait_in_app(
            browser,
            "return document.getElementById('status').textContent == 'running' && "
            "!!document.querySelector('details.step.status-done[data-key=\"0\"]') && "
            "!!document.querySelector('details.step.status-running[data-key=\"1\"]') && "
            "document.querySelectorAll('svg.timeline g.row').length == 2;",
            "the first step done while the run runs",
        )
        assert in_app(browser, "return document.querySelectorAll('svg.graph g.node').length;") == 4
        labels = in_app(browser, "return [...document.querySelectorAll('svg.graph text')].map(t => t.textContent);")
        assert "0 · writer" in labels and "1 · reviewer" in labels
        browser.find_element(By.CSS_SELECTOR, 'details.step[data-key="0"] summary').click()
        diff = wait_in_app(
            browser,
            "const d = document.querySelector('details.step[data-key=\"0\"] pre.diff'); return d && d.textContent;",
            "the agent's diff",
        )
        assert "+++ b/notes.md" in diff and f"+{XSS}" in diff  # shown as text
        assert in_app(browser, "return document.querySelectorAll('pre.diff span.add').length;") >= 1
        seen = in_app(browser, "return document.querySelector('details.step[data-key=\"0\"] .messages').textContent;")
        assert "sim-agent write notes.md" in seen
        shot(browser, shots, "mcp-app-running.png")

        in_app(browser, "document.getElementById('cancel').click();")
        wait_status(browser, "cancelled")
        in_app(browser, "document.getElementById('continue').click();")  # resumes: the reviewer runs again
        wait_status(browser, "running")
        host.release()
        wait_status(browser, "done")
        answer = in_app(browser, "return document.getElementById('answer').textContent;")
        assert "<script>window.__xss" in answer and "javascript:window.__xss" in answer  # text, not markup
        shot(browser, shots, "mcp-app-run.png")

        in_app(browser, "document.getElementById('apply').click();")
        wait_in_app(
            browser,
            "return document.getElementById('notice').textContent.startsWith('the patch is applied');",
            "applied",
        )
        assert (repo / "notes.md").read_text() == f"{XSS}\n"

        browser.switch_to.default_content()
        calls = browser.execute_script("return window.appCalls;")
        assert {"run_view", "cancel_run", "continue_workflow"} <= set(calls)
        assert any(re.fullmatch(r"conductor://runs/\w+/steps/0/diff", c) for c in calls)
        assert in_app(browser, "return window.__xss;") is None
        dangerous = "main img, main iframe, main a, main [onerror], main [onload], main foreignObject"
        assert in_app(browser, f"return document.querySelectorAll({dangerous!r}).length;") == 0
        assert in_app(browser, "return document.scripts.length;") == 1  # the app's own
        browser.switch_to.default_content()
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
        browser.get("about:blank")  # the app's waits end with its page


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_apps_sees_the_server_as_before(service: Service, mode: str) -> None:
    async with Client(build_server(Front(service)), mode=mode) as client:
        tools = (await client.list_tools()).tools
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        run = (await client.call_tool("orchestrate", {"task": "What is 2+2?", "pool": "testpool"})).structured_content
        assert run is not None
        transcript = await client.read_resource(f"conductor://runs/{run['run_id']}")
        refused = await client.call_tool("run_view", {"run_id": run["run_id"]})
    assert {t.name for t in tools} == {"orchestrate", "plan", "continue_workflow", "runs", "pools"}
    assert all(t.meta is None for t in tools) and all(t.meta is None for t in templates)
    assert not [r for r in resources if r.uri.startswith("ui://")]
    assert transcript.contents[0].meta is None
    assert refused.is_error and "did not negotiate text/html;profile=mcp-app" in str(refused.content[0])


@pytest.mark.parametrize("mode", MODES)
async def test_an_apps_client_gets_the_run_view(service: Service, mode: str) -> None:
    async with Client(build_server(Front(service)), mode=mode, extensions=[APPS]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        app = (await client.read_resource(APP_URI)).contents[0]
        run = (await client.call_tool("orchestrate", {"task": "What is 2+2?", "pool": "testpool"})).structured_content
        assert run is not None
        transcript = await client.read_resource(f"conductor://runs/{run['run_id']}")
        view = await client.call_tool("run_view", {"run_id": run["run_id"], "seen": "0", "wait_seconds": 30})
    ui = {name: (tool.meta or {}).get("ui") for name, tool in tools.items()}
    assert ui["orchestrate"] == ui["continue_workflow"] == {"resourceUri": APP_URI}
    assert all(ui[name] == {"resourceUri": APP_URI, "visibility": ["app"]} for name in APP_ONLY_TOOLS)
    assert transcript.contents[0].meta == {"ui": {"resourceUri": APP_URI}}
    assert app.mime_type == APP_MIME_TYPE and app.meta is not None
    assert app.meta["ui"]["csp"] == {
        "connectDomains": [],
        "resourceDomains": [],
        "frameDomains": [],
        "baseUriDomains": [],
    }
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', getattr(app, "text", ""))
    assert policy and "script-src 'sha256-" in policy.group(1) and "connect-src 'none'" in policy.group(1)
    assert "unsafe-inline" not in policy.group(1)
    data = view.structured_content
    assert data is not None and data["status"] == "done"  # a finished run answers at once, whatever it was shown
    assert data["graph"]["boxes"][0]["label"] == "the task" and data["steps"][0]["uri"].endswith("/steps/0")


@pytest.mark.slow
async def test_serve_http_offers_the_app_to_a_client_that_negotiates_it(tmp_path: Path, pool_dir: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = HttpServer(tmp_path / "state", pool_dir)
    try:
        token = server.token_file.read_text().strip()
        for extensions, expected in (([APPS], {"resourceUri": APP_URI}), ([], None)):
            http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
            async with Client(streamable_http_client(server.url, http_client=http), extensions=extensions) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert EXTENSION_ID in (client.server_capabilities.extensions or {})
            assert (tools["orchestrate"].meta or {}).get("ui") == expected
    finally:
        server.stop()
