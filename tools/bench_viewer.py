"""The run viewer's speed where it matters: a heavy run page in a real browser, and the run list over a big store.

Makes a store with one real run of 5 steps whose outputs are ~8,000 tokens each (workers answering through
litellm's mock_response, the normal call path) and --runs more stored runs (copies of a real run's header with
their own ids, times, statuses and pools), then starts `conductor-mcp serve --http` on it and measures:

- the run page loaded in headless chromium (Debian's, through Selenium): navigation start to the load event,
  from the browser's Navigation Timing, repeated; target < 1 s;
- the run list (`GET /ui/`: newest page, a status+pool filter, a page deep in the keyset): wall time per request
  over a kept-alive connection, with the server's own CPU per request read from /proc/<pid>/stat beside it (so
  the client's cost is not what is measured); target < 200 ms.

With --screenshots DIR it also saves the pictures the docs show (the list and a run page, from a fresh store
of a few simulated runs).

    PYTHONPATH=. python tools/bench_viewer.py [--runs 10000] [--loads 7] [--requests 30] [--screenshots docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

# isort: off
from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before litellm loads
import litellm

# isort: on
from conductor_mcp.config import Settings
from conductor_mcp.core.records import Run
from conductor_mcp.learning.sim_tasks import task_set
from conductor_mcp.runs.backends import open_store
from conductor_mcp.runs.store import Store
from conductor_mcp.service.service import Service
from tests.conftest import HttpServer, headless_chromium, orchestrate, scripted_pool, sim_pool_doc, viewer_login

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_TARGET_S, LIST_TARGET_S = 1.0, 0.2
STATUSES = ("done", "done", "done", "failed", "cancelled", "interrupted")
POOLS = ("sim", "frontier", "paper", "local")


INSTANT = {"CONDUCTOR_SIM_TIME_SCALE": "0"}  # simulated runs are instant: what is measured is the viewer


def settings(state_dir: Path, pool_dir: Path, time_scale: float = 0.0) -> Settings:
    return Settings.from_env(state_dir=state_dir, sim_time_scale=time_scale).with_pool_dirs_first(pool_dir)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def long_text(tokens: int) -> str:
    """About `tokens` tokens of prose-like text (short common words; one word is about one token)."""
    words = ["the", "team", "wrote", "a", "careful", "answer", "and", "checked", "every", "step", "of", "it"]
    lines = [" ".join(words[(i + j) % len(words)] for j in range(12)) + "." for i in range(tokens // 13)]
    return "\n".join(lines)


def heavy_run(settings: Settings, pool_dir: Path) -> Run:
    """5 steps of ~8,000-token outputs, each step seeing every earlier one."""
    worker = sim_pool_doc()["workers"][0] | {"model": "openai/long", "params": {"mock_response": long_text(8000)}}
    steps = [("model_0", f"part {i}: write it out in full", "all" if i else []) for i in range(5)]
    scripted_pool(pool_dir, "heavy", steps, workers=[worker], simulation=None)

    async def run() -> Run:
        async with Service.open(settings) as service:
            return await orchestrate(service, "Write a long report in five parts.", pool="heavy")

    return asyncio.run(run())


def fill(store: Store, template: Run, count: int) -> None:
    """`count` stored runs: the template's header with its own id, time (older than the template), status, pool."""
    tasks = [t["question"] for t in task_set(64)]
    started = time.time() - count * 60
    for i in range(count):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started + i * 60)) + ".000+00:00"
        run = template.model_copy(
            update={
                "id": f"b{i:07d}",
                "task": tasks[i % len(tasks)],
                "status": STATUSES[i % len(STATUSES)],
                "pool": POOLS[i % len(POOLS)],
                "created_at": stamp,
                "steps": [],
            }
        )
        store.save_run(run)


def page_loads(base: str, token: str, path: str, loads: int) -> list[float]:
    """Seconds from navigation start to the load event, per load (the first, cold one is dropped)."""
    browser = headless_chromium()
    try:
        viewer_login(browser, base, token)
        timings = []
        for _ in range(loads + 1):
            browser.get(base + path)
            timings.append(
                browser.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd;") / 1000
            )
        return timings[1:]
    finally:
        browser.quit()


def list_requests(server: HttpServer, token: str, path: str, requests: int) -> tuple[list[float], float]:
    """Wall seconds per request and the server's CPU seconds per request."""
    walls = []
    with httpx.Client(base_url=server.url.removesuffix("/mcp"), headers={"authorization": f"Bearer {token}"}) as c:
        c.get(path).raise_for_status()
        cpu_before = cpu_s(server.proc.pid)
        for _ in range(requests):
            began = time.perf_counter()
            c.get(path).raise_for_status()
            walls.append(time.perf_counter() - began)
        cpu = (cpu_s(server.proc.pid) - cpu_before) / requests
    return walls, cpu


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def benchmark(args: argparse.Namespace, root: Path) -> bool:
    pool_dir = root / "pools"
    pool_dir.mkdir()
    state = settings(root / "state", pool_dir)
    run = heavy_run(state, pool_dir)
    outputs = [litellm.token_counter(model="gpt-4o", text=s.output or "") for s in run.steps]  # the mock says 20
    began = time.perf_counter()
    store = open_store(state)
    fill(store, run, args.runs)
    print(
        f"store: 1 run with {len(run.steps)} steps of {outputs} output tokens (gpt-4o tokenizer), + {args.runs} runs "
        f"(filled in {time.perf_counter() - began:.1f}s)"
    )
    server = HttpServer(root / "state", pool_dir, **INSTANT)
    ok = True
    try:
        token = server.token_file.read_text().strip()
        base = server.url.removesuffix("/mcp")
        size = len(httpx.get(f"{base}/ui/runs/{run.id}", headers={"authorization": f"Bearer {token}"}).content)
        cpu_before = cpu_s(server.proc.pid)
        loads = page_loads(base, token, f"/ui/runs/{run.id}", args.loads)
        server_cpu = (cpu_s(server.proc.pid) - cpu_before) / (args.loads + 2)
        page_ok = statistics.median(loads) < PAGE_TARGET_S
        ok &= page_ok
        print(
            f"run page ({size / 1024:.0f} KiB of HTML), navigation to load event in headless chromium: median "
            f"{statistics.median(loads) * 1000:.0f} ms, max {max(loads) * 1000:.0f} ms over {len(loads)} loads; "
            f"server CPU {server_cpu * 1000:.1f} ms/load; target < {PAGE_TARGET_S * 1000:.0f} ms: "
            f"{verdict(page_ok)}"
        )
        middle = store.list_runs(max(1, args.runs // 2))[-1]  # a cursor half-way down the store
        pages = {
            "newest page": "/ui/",
            "status+pool filter": "/ui/?status=failed&pool=paper",
            "deep page (keyset)": f"/ui/?before={middle['created_at']}~{middle['id']}",
        }
        for name, path in pages.items():
            walls, cpu = list_requests(server, token, path, args.requests)
            p95 = sorted(walls)[int(0.95 * (len(walls) - 1))]
            list_ok = p95 < LIST_TARGET_S
            ok &= list_ok
            print(
                f"run list, {name}, {args.runs + 1} runs stored: median {statistics.median(walls) * 1000:.1f} ms, "
                f"p95 {p95 * 1000:.1f} ms, server CPU {cpu * 1000:.1f} ms/request; "
                f"target < {LIST_TARGET_S * 1000:.0f} ms: {verdict(list_ok)}"
            )
    finally:
        server.stop()
        store.close()
    return ok


def screenshots(directory: Path, root: Path) -> None:
    """The docs' pictures: the list of a few simulated runs, and the page of the one with the most steps (its
    last step opened). The simulated latencies run at a tenth of their nominal time, so the timeline has shape."""
    pool_dir = root / "shots-pools"
    pool_dir.mkdir()

    async def simulated_runs() -> list[Run]:
        async with Service.open(settings(root / "shots", pool_dir, time_scale=0.1)) as service:
            runs = []
            for task in task_set(8, seed=3):
                metadata = {"domain": task["domain"], "answer": task["answer"], "difficulty": task["difficulty"]}
                runs.append(await orchestrate(service, task["question"], pool="sim", metadata=metadata))
            return runs

    runs = asyncio.run(simulated_runs())
    shown = max(runs, key=lambda run: (len(run.steps), run.totals.wall_s))
    server = HttpServer(root / "shots", pool_dir, **INSTANT)
    browser = headless_chromium(1280, 720)
    try:
        base = server.url.removesuffix("/mcp")
        viewer_login(browser, base, server.token_file.read_text().strip())
        directory.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(directory / "viewer-list.png"))
        browser.set_window_size(1280, 1900)
        browser.get(f"{base}/ui/runs/{shown.id}#step-{shown.steps[-1].key}")
        time.sleep(1.0)  # the opened step's messages arrive
        browser.execute_script("window.scrollTo(0, 0);")
        browser.save_screenshot(str(directory / "viewer-run.png"))
        print(f"screenshots: {directory / 'viewer-list.png'}, {directory / 'viewer-run.png'}")
    finally:
        browser.quit()
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10_000, help="stored runs beside the heavy one")
    parser.add_argument("--loads", type=int, default=7, help="browser loads of the run page (after one warm-up)")
    parser.add_argument("--requests", type=int, default=30, help="requests per run-list variant")
    parser.add_argument("--screenshots", type=Path, help="also save the docs' screenshots in this folder (docs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ok = benchmark(args, Path(tmp))
        if args.screenshots:
            screenshots(args.screenshots, Path(tmp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
