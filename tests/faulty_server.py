"""A deliberately unreliable OpenAI-compatible server for fault-injection tests (loopback only).

The model name picks the behaviour:
  ok            answers "ANSWER: 42"
  storm         two of every three requests get 429 (a rate-limit storm), the third answers
  flaky500-N    the first N requests get 500, then it answers
  slow          answers after 30 s (for timeouts)
  down          always 503
  badrequest    always 400, echoing the request's Authorization header (as careless providers do)
  garbage       answers text that is no workflow
  conductor     a conductor: [ok, down, ok(all)] at first; asked as a worker (recursion), [ok]
  empty_choices 200 with `choices: []`
  no_message    200 with a choice that has no message
  non_text      200 with a message whose content is a JSON object, not text
  surrogate     answers text holding a lone surrogate (JSON carries it as \\ud800) and a NUL
GET /stats returns the request count per model.

    python tests/faulty_server.py PORT
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

counts: collections.Counter[str] = collections.Counter()
WORK_SO_FAR = "## The team's work so far"


def completion(model: str, text: str) -> JSONResponse:
    return JSONResponse(
        {
            "id": f"cmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
        }
    )


def raw(model: str, choices: list[object]) -> Response:
    """A 200 response with these choices, serialised as JSON may carry them (lone surrogates escaped)."""
    body = {
        "id": f"cmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    }
    return Response(json.dumps(body), media_type="application/json")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "error", "code": status}}, status_code=status)


def workflow(*steps: tuple[str, str, object]) -> str:
    return json.dumps(
        {"reasoning": "canned", "steps": [{"worker": w, "instruction": i, "access": a} for w, i, a in steps]}
    )


async def chat(request: Request) -> Response:
    body = await request.json()
    model = body["model"]
    counts[model] += 1
    n = counts[model]
    if model == "ok":
        return completion(model, "Checked the arithmetic.\nANSWER: 42")
    if model == "storm":
        return completion(model, "ANSWER: 42") if n % 3 == 0 else error(429, "rate limit exceeded, slow down")
    if model.startswith("flaky500-"):
        failures = int(model.split("-", 1)[1])
        return error(500, "internal error") if n <= failures else completion(model, "ANSWER: 42")
    if model == "slow":
        await asyncio.sleep(30)
        return completion(model, "ANSWER: 42")
    if model == "down":
        return error(503, "service unavailable")
    if model == "badrequest":
        return error(400, f"invalid request (auth was {request.headers.get('authorization')})")
    if model == "garbage":
        return completion(model, "I think the team should work hard on this one.")
    if model == "empty_choices":
        return raw(model, [])
    if model == "no_message":
        return raw(model, [{"index": 0, "finish_reason": "stop"}])
    if model == "non_text":
        return raw(
            model, [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": {"a": 1}}}]
        )
    if model == "surrogate":
        text = "Half a pair: \ud800, a NUL: \x00.\nANSWER: 42"
        return raw(model, [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}])
    if model == "conductor":
        prompt = body["messages"][-1]["content"]
        if WORK_SO_FAR in prompt:
            return completion(model, workflow(("ok", "Finish the task from the work that finished.", [])))
        return completion(model, workflow(("ok", "Solve it.", []), ("down", "Check it.", [0]), ("ok", "Final.", "all")))
    return error(404, f"unknown model {model}")


async def models(_: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [{"id": "faulty", "object": "model"}]})


async def stats(_: Request) -> JSONResponse:
    return JSONResponse(dict(counts))


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/stats", stats),
    ]
)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
