"""The run viewer in a real browser (headless chromium through Selenium) against `conductor-mcp serve --http`:
the list and a run page of a finished run, a recursive run, a running run that updates without a reload, a
step's exact messages on a click, `conductor-mcp view` watching a run of another process, and model output
that tries to run script (it must run nothing)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import (
    HttpServer,
    headless_chromium,
    scripted_pool,
    server_env,
    slow_pool_doc,
    viewer_login,
)

pytestmark = pytest.mark.slow

XSS = (
    '<script>window.__xss = "script"</script> <img src=x onerror="window.__xss = \'img\'"> '
    "<a href=\"javascript:window.__xss = 'link'\">click me</a> <svg onload=\"window.__xss = 'svg'\"></svg>"
)
THREE_STEPS = [("model_0", "draft an answer", []), ("model_1", "check the draft", [0]), ("model_2", "final", "all")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium()
    yield driver
    driver.quit()


def token_of(server: HttpServer) -> str:
    return server.token_file.read_text().strip()


def base_of(server: HttpServer) -> str:
    return server.url.removesuffix("/mcp")


def chat(server: HttpServer, pool: str, task: str) -> httpx.Response:
    """One run through the OpenAI door, to the end."""
    body = {"model": f"conductor/{pool}", "messages": [{"role": "user", "content": task}]}
    headers = {"authorization": f"Bearer {token_of(server)}"}
    return httpx.post(f"{base_of(server)}/v1/chat/completions", json=body, headers=headers, timeout=60)


def wait_for(condition: Any, timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def text_of(browser: Any, css: str) -> str:
    """The text of the first match, read in the page (a live page may swap the element out meanwhile)."""
    return browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)


def test_a_finished_run_in_the_list_and_on_its_page(browser: Any, tmp_path: Path, pool_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    scripted_pool(pool_dir, "three", THREE_STEPS)
    server = HttpServer(tmp_path / "state", pool_dir)
    try:
        answer = chat(server, "three", "Name three prime numbers.")
        run_id = answer.headers["x-conductor-run-id"]
        assert answer.headers["x-conductor-viewer-url"] == f"{base_of(server)}/ui/runs/{run_id}"
        viewer_login(browser, base_of(server), token_of(server))
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{run_id}"]')
        assert "done" in row.text and "Name three prime numbers." in row.text and "three" in row.text
        row.find_element(By.TAG_NAME, "a").click()
        wait_for(lambda: run_id in text_of(browser, "h1"), what="the run page")
        assert text_of(browser, "#run-status") == "done"
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.graph g.node")) == 5  # task, 3 steps, answer
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.row")) == 3
        step = browser.find_element(By.ID, "step-1")
        assert not step.find_elements(By.CSS_SELECTOR, ".message-list")
        step.find_element(By.TAG_NAME, "summary").click()  # opening a step loads its exact messages

        messages = wait_for(lambda: step.find_elements(By.CSS_SELECTOR, ".message-list .message"), what="messages")
        assert "check the draft" in messages[-1].text and "Name three prime numbers." in step.text
        browser.find_element(By.CSS_SELECTOR, 'svg.graph a[href="#step-2"]').click()  # a node opens its step
        wait_for(lambda: browser.find_element(By.ID, "step-2").get_attribute("open"), what="step 2 opened")
        assert asyncio.run(mcp_viewer_url(server)).startswith(f"{base_of(server)}/ui/runs/")
    finally:
        server.stop()


async def mcp_viewer_url(server: HttpServer) -> str:
    """The viewer's page of a run, as an MCP result carries it."""
    async with server.client() as client:
        result = await client.call_tool("orchestrate", {"task": "What is 6*7?", "pool": "three"})
    assert result.structured_content is not None
    return result.structured_content["viewer_url"]


def test_a_recursive_run_shows_the_nested_workflow_inside_its_step(
    browser: Any, tmp_path: Path, pool_dir: Path
) -> None:
    from selenium.webdriver.common.by import By

    steps = [("model_0", "draft", []), ("model_1", "check", [0]), ("conductor", "review the team", [0, 1])]
    scripted_pool(pool_dir, "recursive", steps, recursion=True, max_depth=1)
    server = HttpServer(tmp_path / "state", pool_dir)
    try:
        run_id = chat(server, "recursive", "What is 6*7?").headers["x-conductor-run-id"]
        viewer_login(browser, base_of(server), token_of(server))
        browser.get(f"{base_of(server)}/ui/runs/{run_id}#step-2.1")  # a nested step, opened from its link
        nested = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#step-2 .nested details.step"), what="nest")
        assert [n.get_attribute("data-key") for n in nested] == ["2.0", "2.1", "2.2"]
        assert browser.find_element(By.ID, "step-2.1").get_attribute("open")
        assert browser.find_elements(By.CSS_SELECTOR, "#step-2 .nested svg.graph")
    finally:
        server.stop()


def slow_run(server: HttpServer) -> tuple[httpx.Client, Any]:
    """Start a run on the slow pool through a streamed request; its id comes in the first response headers."""
    client = httpx.Client(timeout=60, headers={"authorization": f"Bearer {token_of(server)}"})
    body = {"model": "conductor/slow", "stream": True, "messages": [{"role": "user", "content": "What is 6*7?"}]}
    stream = client.stream("POST", f"{base_of(server)}/v1/chat/completions", json=body)
    return client, stream


def watch_until_done(browser: Any, url: str) -> None:
    """The page of a running run must move on by itself: some steps done while the run still runs, then done,
    all without a reload (a flag set on the window survives)."""
    browser.get(url)
    assert text_of(browser, "#run-status") == "running"
    browser.execute_script("window.__kept = 'same page';")
    done_steps = "return document.querySelectorAll('details.step.status-done').length;"
    wait_for(
        lambda: browser.execute_script(
            "return document.getElementById('run-status').innerText == 'running' && "
            "document.querySelectorAll('details.step.status-done').length > 0;"
        ),
        what="a step done while the run still runs",
    )
    wait_for(lambda: text_of(browser, "#run-status") == "done", timeout_s=30, what="the run done")
    assert browser.execute_script(done_steps) == 3
    assert browser.execute_script("return window.__kept;") == "same page"


def slow_server(tmp_path: Path, pool_dir: Path) -> HttpServer:
    simulation = slow_pool_doc("slow", first_token_s=1.2)["simulation"]
    scripted_pool(pool_dir, "slow", THREE_STEPS, simulation=simulation)
    return HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_SIM_TIME_SCALE="1")


def test_a_running_run_updates_without_a_reload(browser: Any, tmp_path: Path, pool_dir: Path) -> None:
    server = slow_server(tmp_path, pool_dir)
    try:
        client, request = slow_run(server)
        with client, request as response:
            run_id = response.headers["x-conductor-run-id"]
            viewer_login(browser, base_of(server), token_of(server))
            watch_until_done(browser, f"{base_of(server)}/ui/runs/{run_id}")
            response.read()
    finally:
        server.stop()


def test_view_serves_the_store_read_only_and_watches_another_process(
    browser: Any, tmp_path: Path, pool_dir: Path
) -> None:
    server = slow_server(tmp_path, pool_dir)
    view = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "view", "--no-browser"],
        env=server_env(tmp_path / "state"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert view.stdout is not None
        url = view.stdout.readline().split(" at ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:") and "/ui/login?code=" in url
        base = url.split("/ui/")[0]
        wait_for(lambda: httpx.get(f"{base}/ui/static/viewer.css").is_success, what="the viewer up")
        browser.get(url)  # the one-time link signs in
        assert "Runs" in text_of(browser, "h1")
        client, request = slow_run(server)
        with client, request as response:
            watch_until_done(browser, f"{base}/ui/runs/{response.headers['x-conductor-run-id']}")
            response.read()
        browser.delete_all_cookies()
        browser.get(url)  # single use: a second visit is refused
        assert "Sign in" in text_of(browser, "h1")
    finally:
        view.terminate()
        view.wait(timeout=20)
        server.stop()


def test_model_output_that_tries_to_run_script_runs_nothing(browser: Any, tmp_path: Path, pool_dir: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    evil = {"id": "evil", "model": "openai/evil", "params": {"mock_response": XSS}, "description": f"evil {XSS}"}
    scripted_pool(
        pool_dir,
        "xss",
        [("evil", f"repeat {XSS}", []), ("evil", "again", [0])],
        anonymize=False,
        workers=[evil],
        simulation=None,
    )
    server = HttpServer(tmp_path / "state", pool_dir)
    try:
        run_id = chat(server, "xss", f"task {XSS}").headers["x-conductor-run-id"]
        viewer_login(browser, base_of(server), token_of(server))
        browser.get(f"{base_of(server)}/ui/runs/{run_id}")
        for key in ("0", "1"):
            step = browser.find_element(By.ID, f"step-{key}")
            step.find_element(By.TAG_NAME, "summary").click()
            wait_for(lambda s=step: s.find_elements(By.CSS_SELECTOR, ".message-list"), what="messages")
        assert "<script>window.__xss" in text_of(browser, "#step-1 .output")  # shown as text
        for page in (None, f"{base_of(server)}/ui/", f"{base_of(server)}/ui/runs/{run_id}/steps/1/messages"):
            if page:
                browser.get(page)
            time.sleep(0.3)
            assert browser.execute_script("return window.__xss;") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "main img, main a[href^='javascript'], main script")
            with pytest.raises(NoAlertPresentException):
                browser.switch_to.alert.text  # noqa: B018
    finally:
        server.stop()


def test_markdown_output_renders_and_its_payloads_run_nothing(browser: Any, tmp_path: Path, pool_dir: Path) -> None:
    """Model output as markdown (a table, a code block), with markdown's own ways to smuggle script (javascript:
    links and autolinks, reference links, images, a fence's info string, HTML in a table cell): rendered, inert."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    from tests.doors.viewer.test_viewer_markdown import EVIL, MARKDOWN

    writer = {"id": "md", "model": "openai/md", "params": {"mock_response": MARKDOWN + EVIL}, "description": "md"}
    scripted_pool(pool_dir, "md", [("md", "write", [])], anonymize=False, workers=[writer], simulation=None)
    server = HttpServer(tmp_path / "state", pool_dir)
    try:
        run_id = chat(server, "md", "task").headers["x-conductor-run-id"]
        viewer_login(browser, base_of(server), token_of(server))
        browser.get(f"{base_of(server)}/ui/runs/{run_id}")
        step = browser.find_element(By.ID, "step-0")
        step.find_element(By.TAG_NAME, "summary").click()
        assert browser.find_elements(By.CSS_SELECTOR, "#step-0 .markdown.output table td code")
        raw = step.find_element(By.CSS_SELECTOR, ".raw-text")
        raw.find_element(By.TAG_NAME, "summary").click()  # the raw text, one click away
        assert "| case | expected |" in raw.find_element(By.CSS_SELECTOR, "pre.raw").text
        for link in browser.find_elements(By.CSS_SELECTOR, "main .markdown a"):
            assert link.get_attribute("href").startswith("https://"), link.get_attribute("href")
        time.sleep(0.3)
        assert browser.execute_script("return window.__xss;") is None
        assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script, main svg[onload], main iframe")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
    finally:
        server.stop()
