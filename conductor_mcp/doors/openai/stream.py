"""The OpenAI streaming formats: a run's progress as reasoning summaries, then its answer as text deltas.

Responses: `response.created`, a reasoning item whose summary grows with each progress line, then the assistant
message (`response.output_text.delta`s, `response.output_item.done`), the final worker's calls of the client's
tools (`function_call` items), and `response.completed` with usage.
Chat Completions: `chat.completion.chunk`s with `reasoning_content` deltas (as vLLM emits them), `content`
deltas, `tool_calls` deltas, a final chunk with `finish_reason`, a usage chunk, then `data: [DONE]`. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from conductor_mcp.core.records import Run
from conductor_mcp.doors.openai.replies import (
    answer_items,
    chat_tool_calls,
    chat_usage,
    finish_reason,
    finished_ok,
    reasoning_item,
    response_object,
    run_error,
)

KEEPALIVE = ": keep-alive\n\n"
TEXT_CHUNK = 400  # characters per answer delta


def _chunks(text: str) -> list[str]:
    return [text[i : i + TEXT_CHUNK] for i in range(0, len(text), TEXT_CHUNK)] or [""]


class ResponsesStream:
    """Builds the Responses event sequence for one run; `sequence_number` grows by one per event."""

    def __init__(self, run: Run, model: str, created: int) -> None:
        self.run, self.model, self.created = run, model, created
        self.sequence = 0
        self.summary = ""

    def _event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    def _response(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        return response_object(self.run, self.model, output, self.created)

    def start(self) -> str:
        return self._event("response.created", response=self._response([])) + self._event(
            "response.in_progress", response=self._response([])
        )

    def progress(self, line: str) -> str:
        """A progress line as a reasoning-summary delta (the reasoning item opens with the first one)."""
        opening = ""
        if not self.summary:
            item = {**reasoning_item(self.run, ""), "summary": []}
            opening = self._event("response.output_item.added", output_index=0, item=item) + self._event(
                "response.reasoning_summary_part.added",
                item_id=item["id"],
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        self.summary += line + "\n"
        return opening + self._event(
            "response.reasoning_summary_text.delta",
            item_id=reasoning_item(self.run, "")["id"],
            output_index=0,
            summary_index=0,
            delta=line + "\n",
        )

    def _close_reasoning(self) -> tuple[str, list[dict[str, Any]]]:
        if not self.summary:
            return "", []
        item, where = reasoning_item(self.run, self.summary), {"output_index": 0, "summary_index": 0}
        events = (
            self._event("response.reasoning_summary_text.done", item_id=item["id"], text=self.summary, **where)
            + self._event("response.reasoning_summary_part.done", item_id=item["id"], part=item["summary"][0], **where)
            + self._event("response.output_item.done", output_index=0, item=item)
        )
        return events, [item]

    def finish(self, run: Run) -> str:
        """The answer as text deltas and its tool calls, then `response.completed` (or `.incomplete`, or
        `.failed` without an answer)."""
        self.run = run
        events, output = self._close_reasoning()
        if not finished_ok(run):
            return events + self._event("response.failed", response=self._response(output))
        for item in answer_items(run):
            index = len(output)
            events += self._message(item, index) if item["type"] == "message" else self._function_call(item, index)
            output.append(item)
        final = self._response(output)
        return events + self._event(f"response.{final['status']}", response=final)

    def _message(self, item: dict[str, Any], index: int) -> str:
        text = item["content"][0]["text"]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        events = self._event(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
        )
        events += self._event("response.content_part.added", part=part, **where)
        for delta in _chunks(text):
            events += self._event("response.output_text.delta", delta=delta, logprobs=[], **where)
        events += self._event("response.output_text.done", text=text, logprobs=[], **where)
        events += self._event("response.content_part.done", part=item["content"][0], **where)
        return events + self._event("response.output_item.done", output_index=index, item=item)

    def _function_call(self, item: dict[str, Any], index: int) -> str:
        where = {"item_id": item["id"], "output_index": index}
        opened = {**item, "status": "in_progress", "arguments": ""}
        return (
            self._event("response.output_item.added", output_index=index, item=opened)
            + self._event("response.function_call_arguments.delta", delta=item["arguments"], **where)
            + self._event("response.function_call_arguments.done", arguments=item["arguments"], **where)
            + self._event("response.output_item.done", output_index=index, item=item)
        )


class ChatStream:
    """Builds the `chat.completion.chunk` sequence for one run."""

    def __init__(self, run: Run, model: str, created: int) -> None:
        self.run, self.model, self.created = run, model, created

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        data = {
            "id": f"chatcmpl-{self.run.id}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "conductor_run_id": self.run.id,
            **extra,
        }
        return f"data: {json.dumps(data)}\n\n"

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return self._chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}])

    def start(self) -> str:
        return self._delta({"role": "assistant", "content": ""})

    def progress(self, line: str) -> str:
        return self._delta({"reasoning_content": line + "\n"})

    def finish(self, run: Run) -> str:
        """Content deltas, the finish reason, usage, [DONE]; a run without an answer ends in an error event."""
        if not finished_ok(run):
            return f"data: {json.dumps({'error': run_error(run)[1]})}\n\ndata: [DONE]\n\n"
        calls = chat_tool_calls(run)
        texts = _chunks(run.answer or "") if run.answer or not calls else []
        events = "".join(self._delta({"content": delta}) for delta in texts)
        if calls:
            events += self._delta({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
        events += self._delta({}, finish_reason(run))
        events += self._chunk([], usage=chat_usage(run))
        return events + "data: [DONE]\n\n"
