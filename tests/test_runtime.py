"""The server's garbage collector settings (conductor_mcp/runtime.py), checked in a fresh interpreter: they are
process-wide and would leak into the rest of the test session."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, weakref
import conductor_mcp.service, conductor_mcp.models.litellm_backend  # what a server has loaded when it settles
from conductor_mcp.runtime import FULL_COLLECTION_EVERY, settle_collector

settle_collector()
class Node: pass
a, b = Node(), Node()
a.peer, b.peer = b, a  # a cycle made while serving: only the collector frees it
alive = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold(),
                  "every": FULL_COLLECTION_EVERY, "cycle_freed": alive() is None}))
"""


@pytest.mark.slow  # a probe process
def test_settle_collector_freezes_start_up_and_still_frees_cycles_made_later() -> None:
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    state = json.loads(probe.stdout)
    assert state["frozen"] > 100_000  # litellm and pydantic alone are hundreds of thousands of objects
    assert state["threshold"][2] == state["every"] == 1000
    assert state["cycle_freed"]
