"""The viewer shows model output as sanitised markdown (raw text one click away), and the run list pages both
ways with a total. In process over HTTP; tests/doors/test_viewer_browser.py runs the payloads in chromium."""

from __future__ import annotations

import re
from pathlib import Path

from conductor_mcp.core.limits import MAX_RENDERED_CHARS
from conductor_mcp.doors.viewer.markdown import output_html
from conductor_mcp.service.service import Service
from tests.conftest import orchestrate, scripted_pool, sim_pool_doc
from tests.doors.viewer.test_viewer import BEARER, serving, stored

MARKDOWN = """## Plan
1. **sort** the list
2. test it

| case | expected |
|------|----------|
| `[]` | `[]` |

```python
def f(xs):
    return sorted(xs)
```
See [the docs](https://docs.python.org/3/) and ~~nothing else~~.
"""
# Markdown's own ways to smuggle script, besides raw HTML: links, autolinks, images, a fence's info string.
PAYLOADS = [
    '<script>window.__xss="raw"</script>',
    "<img src=x onerror=\"window.__xss='img'\">",
    "[click](javascript:window.__xss='link')",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<javascript:window.__xss='autolink'>",
    "![pic](https://attacker.example/pixel.png)",
    '```"><script>window.__xss="fence"</script>\ncode\n```',
    "| a |\n|---|\n| <svg onload=\"window.__xss='cell'\"> |",
    "[ref][r]\n\n[r]: javascript:window.__xss='ref'",
    "<a href=\"javascript:window.__xss='a'\">a</a>",
]
EVIL = "\n\n".join(PAYLOADS)


def test_markdown_renders_lists_tables_code_and_links() -> None:
    html = output_html(MARKDOWN, "output")
    for tag in (
        "<h2>Plan</h2>",
        "<ol>",
        "<strong>sort</strong>",
        "<table>",
        "<td><code>[]</code></td>",
        '<code class="language-python">',
        "<s>nothing else</s>",
    ):
        assert tag in html, tag
    assert '<a href="https://docs.python.org/3/" rel="noopener noreferrer nofollow">the docs</a>' in html
    raw = re.search(
        r'<details class="raw-text"><summary>raw text</summary><pre class="text raw">(.*)</pre>', html, re.S
    )
    assert raw and "| case | expected |" in raw.group(1)


def test_markup_in_model_output_stays_inert() -> None:
    html = output_html(EVIL, "output")
    rendered = html.split('<details class="raw-text">')[0]
    assert "<script" not in html and "<img" not in html and "<svg" not in html
    assert not re.search(r"<a [^>]*href=\"(?!https?:)", html)  # every link is http(s)
    assert not re.search(r"<[^>]*javascript:", rendered)  # text has no raw "<": every "<" opens a real tag
    assert 'href="data:' not in html and not re.search(r"<[^>]* src=", rendered)  # an image is a link, never a fetch
    assert "&lt;script&gt;window.__xss=&quot;raw&quot;&lt;/script&gt;" in rendered


def test_long_output_is_shown_as_text_only() -> None:
    html = output_html("*x* " * (MAX_RENDERED_CHARS // 4 + 1), "output")
    assert html.startswith('<pre class="text output">') and "<em>" not in html


async def test_the_run_page_renders_outputs_and_keeps_them_inert(viewer_service: Service, pool_dir: Path) -> None:
    doc = sim_pool_doc()
    doc["workers"][0] = {
        "id": "alpha",
        "model": "openai/md",
        "description": "writes markdown",
        "params": {"mock_response": MARKDOWN + EVIL},
    }
    name = scripted_pool(pool_dir, "md", [("model_0", "answer", [])], workers=doc["workers"])
    run = await orchestrate(viewer_service, "task", pool=name)
    async with serving(viewer_service) as client:
        page = (await client.get(f"/ui/runs/{run.id}", headers=BEARER)).text
    assert '<div class="markdown answer">' in page and '<div class="markdown output">' in page
    assert "<table>" in page and '<code class="language-python">' in page
    assert "<script>window" not in page and "<img" not in page and "<svg onload" not in page
    assert 'href="javascript:' not in page and 'href="data:' not in page


async def test_the_list_pages_newer_and_older_with_a_total(viewer_service: Service) -> None:
    for i in range(120):
        stored(
            viewer_service,
            f"run{i:03d}",
            f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000+00:00",
            "failed" if i % 10 == 0 else "done",
        )
    ids = lambda text: re.findall(r'data-run="(run\d+)"', text)  # noqa: E731
    link = lambda text, kind: re.search(rf'class="{kind}" href="([^"]+)"', text).group(1).replace("&amp;", "&")  # noqa: E731
    async with serving(viewer_service) as client:
        first = (await client.get("/ui/", headers=BEARER)).text
        assert '<span class="count">120 runs</span>' in first and 'class="newer"' not in first
        second = (await client.get(link(first, "older"), headers=BEARER)).text
        third = (await client.get(link(second, "older"), headers=BEARER)).text
        assert ids(third) == [f"run{i:03d}" for i in range(19, -1, -1)] and 'class="older"' not in third
        back = (await client.get(link(third, "newer"), headers=BEARER)).text
        assert ids(back) == ids(second) == [f"run{i:03d}" for i in range(69, 19, -1)]
        top = (await client.get(link(back, "newer"), headers=BEARER)).text
        assert ids(top) == ids(first) and 'class="newer"' not in top and 'class="older"' in top
        failed = (await client.get("/ui/?status=failed", headers=BEARER)).text
        assert '<span class="count">12 runs</span>' in failed
        bad = await client.get("/ui/?after=nonsense", headers=BEARER)
        assert bad.status_code == 400 and "after: must be CREATED_AT~RUN_ID" in bad.text
    store = viewer_service._store
    cursor = ("2026-01-01T00:01:00.000+00:00", "run060")
    assert [r["id"] for r in store.list_runs(3, after=cursor)] == ["run063", "run062", "run061"]
    assert store.count_runs("failed") == 12 and store.count_runs(pool="nowhere") == 0


def test_a_diff_is_shown_line_by_line_classed_and_escaped() -> None:
    from conductor_mcp.doors.viewer.work import diff_html

    header = ["diff --git a/x b/x", "--- a/x", "+++ b/x", "@@ -1 +1 @@"]
    diff = "\n".join([*header, "-old", "--- a removed SQL comment", '+<script>window.__xss="diff"</script>', " same"])
    html = diff_html(diff)
    assert '<span class="file">diff --git a/x b/x</span>' in html and '<span class="hunk">@@ -1 +1 @@</span>' in html
    assert '<span class="file">--- a/x</span>' in html and '<span class="del">-old</span>' in html
    assert '<span class="del">--- a removed SQL comment</span>' in html
    assert '<span class="add">+&lt;script&gt;window.__xss=&quot;diff&quot;&lt;/script&gt;</span>' in html
    assert html.endswith("\n same") and "<script" not in html
