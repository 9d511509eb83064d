"""What a local model server keeps across servers and tells about itself, over llama.cpp's HTTP endpoints: the
conductor's slot (the KV cache of its last prompt, which opens with the pool's byte-identical prefix) saved to a
directory when a server stops and restored when the next starts, and its counters of tokens and seconds."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from conductor_mcp.core.limits import SLOT_IO_TIMEOUT_S
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

CONDUCTOR_SLOT, WORKER_SLOT = 0, 1  # llama.cpp slots, one per prompt family
_FAILURES = (urllib.error.URLError, OSError, ValueError)


def post(url: str, body: dict[str, Any], timeout_s: float) -> Any:
    """POST a JSON body, read a JSON answer (urllib's errors, OSError or ValueError when that fails)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.load(response)


def counters(root: str) -> dict[str, float] | None:
    """llama.cpp's cumulative counters (its /metrics, `llamacpp:` names without the prefix): prompt tokens
    evaluated and cached, tokens generated, and their seconds; None where the server does not serve them."""
    try:
        with urllib.request.urlopen(f"{root}/metrics", timeout=2.0) as response:
            text = response.read().decode()
    except _FAILURES:
        return None
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("llamacpp:"):
            with contextlib.suppress(ValueError):
                found[name.removeprefix("llamacpp:")] = float(value)
    return found or None


def restore(root: str, directory: Path, filename: str) -> None:
    """Load the conductor's slot as the last server of this model left it, if it saved one."""
    if not (directory / filename).exists():
        return
    try:
        restored = post(f"{root}/slots/{CONDUCTOR_SLOT}?action=restore", {"filename": filename}, SLOT_IO_TIMEOUT_S)
    except _FAILURES as exc:  # an unreadable or stale file: the prefix is evaluated anew
        log.warning("local_slot_not_restored", file=filename, error=str(exc))
        return
    log.info("local_slot_restored", file=filename, tokens=restored.get("n_restored"))


def save(root: str, directory: Path, filename: str) -> None:
    """Save the conductor's slot for the next server, before this one stops. Written under a new name and renamed,
    and only if the slot holds tokens, so a server that never planned keeps the last saved state."""
    new = directory / f"{filename}.new"
    try:
        saved = post(f"{root}/slots/{CONDUCTOR_SLOT}?action=save", {"filename": new.name}, SLOT_IO_TIMEOUT_S)
    except _FAILURES as exc:
        log.warning("local_slot_not_saved", file=filename, error=str(exc))
        return
    with contextlib.suppress(OSError):
        if saved.get("n_saved"):
            new.replace(directory / filename)
        else:
            new.unlink()
