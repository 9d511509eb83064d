"""Every /v1 error comes back in OpenAI's shape (JSON, `error.type`, a status a client can act on), whatever the
body: nested past any recursion limit, tool calls of the wrong shape, ids and options that mean nothing; and the
viewer's redirect carries the security headers like every other viewer answer. In process, over the real app."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_mcp.config import Settings
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.doors.openai.wire import chat_request, chat_tool_reply, responses_request, responses_tool_reply
from conductor_mcp.errors import ConductorError
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import sim_pool_doc, write_pool

TOKEN = "openai-errors-t0ken-for-the-tests-0123456789"
BEARER = {"authorization": f"Bearer {TOKEN}"}
USER = {"role": "user", "content": "hi"}


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, pool_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    write_pool(pool_dir, sim_pool_doc())
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)) as service:
        app = http_app(build_server(Front(service)), "127.0.0.1", TOKEN, [], Front(service))
        assert isinstance(app, BearerTokenMiddleware)
        async with app.app.router.lifespan_context(app.app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8765", headers=BEARER
            ) as client:
                yield client


def openai_shaped(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json", response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["type"] in ("invalid_request_error", "server_error")
    return error


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", '{"model": "conductor", "messages": ' + nested(1000) + "}"),
        ("/v1/responses", '{"model": "conductor", "input": ' + nested(100_000) + "}"),
        ("/v1/responses", '{"model": "conductor", "metadata": {"a": ' + nested(5000) + "}, " + '"input": "hi"}'),
        ("/v1/responses", nested(1000)),
    ],
)
async def test_deeply_nested_json_is_a_400_in_openais_shape(
    tmp_path: Path, pool_dir: Path, path: str, body: str
) -> None:
    async with serving(tmp_path, pool_dir) as client:
        error = openai_shaped(await client.post(path, content=body), 400)
    assert "nested" in error["message"] or "must be" in error["message"]


@pytest.mark.parametrize("calls", ["x", [1], ["x"], [{"function": None}], [{"function": "f"}], [None], {"a": 1}])
async def test_malformed_tool_calls_are_a_400_naming_the_item(tmp_path: Path, pool_dir: Path, calls: Any) -> None:
    messages = [USER, {"role": "assistant", "content": "", "tool_calls": calls}, {"role": "user", "content": "go"}]
    async with serving(tmp_path, pool_dir) as client:
        response = await client.post("/v1/chat/completions", json={"model": "conductor", "messages": messages})
    error = openai_shaped(response, 400)
    assert error["message"].startswith("messages[1].tool_calls"), error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_"}, "previous_response_id"),
        ({"previous_response_id": "resp_x y"}, "previous_response_id"),
        ({"previous_response_id": "msg_0123456789abcdef"}, "previous_response_id"),
        ({"reasoning": "high"}, "reasoning"),
        ({"reasoning": ["high"]}, "reasoning"),
    ],
)
async def test_ids_and_options_that_mean_nothing_are_refused(
    tmp_path: Path, pool_dir: Path, body: dict[str, Any], param: str
) -> None:
    async with serving(tmp_path, pool_dir) as client:
        response = await client.post("/v1/responses", json={"model": "conductor", "input": "hi", **body})
    assert openai_shaped(response, 400)["param"] == param


async def test_an_unknown_previous_response_is_a_404(tmp_path: Path, pool_dir: Path) -> None:
    async with serving(tmp_path, pool_dir) as client:
        body = {"model": "conductor", "input": "hi", "previous_response_id": "resp_0123456789abcdef_2"}
        assert openai_shaped(await client.post("/v1/responses", json=body), 404)["code"] == "not_found"


async def test_the_viewers_redirect_carries_the_security_headers(tmp_path: Path, pool_dir: Path) -> None:
    async with serving(tmp_path, pool_dir) as client:
        response = await client.get("/ui")
    assert response.status_code == 308 and response.headers["location"] == "/ui/"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY" and response.headers["referrer-policy"] == "no-referrer"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["user", "assistant", "tool", "function", "function_call_output", "message", "resp_", "call_x"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "type",
                    "tool_calls",
                    "function",
                    "name",
                    "arguments",
                    "call_id",
                    "output",
                    "text",
                    "tool_call_id",
                    "effort",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
bodies = st.fixed_dictionaries(
    {"model": st.just("conductor")},
    optional={
        "input": json_values,
        "messages": json_values,
        "instructions": json_values,
        "reasoning": json_values,
        "tools": json_values,
        "tool_choice": json_values,
        "metadata": json_values,
        "max_output_tokens": json_values,
        "reasoning_effort": json_values,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_any_body_is_translated_or_refused_with_a_readable_error(body: dict[str, Any]) -> None:
    json.dumps(body)  # what a client can send
    for translate in (
        responses_request,
        chat_request,
        chat_tool_reply,
        lambda b: responses_tool_reply(b, None),
    ):
        with contextlib.suppress(ConductorError):
            translate(body)


@pytest.mark.parametrize("item", [{"type": []}, {"type": {"a": 1}}, {"role": "user", "content": [{"type": [1]}]}])
async def test_items_of_an_unhashable_type_are_a_400(tmp_path: Path, pool_dir: Path, item: Any) -> None:
    """What the property test below found: a `type` that is a list or an object reached a set lookup."""
    async with serving(tmp_path, pool_dir) as client:
        response = await client.post("/v1/responses", json={"model": "conductor", "input": [item]})
    assert openai_shaped(response, 400)["message"].startswith("input[0]")
