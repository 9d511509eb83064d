"""The server's garbage collector settings (conductor_mcp/runtime/loop.py), checked in a fresh interpreter: they are
process-wide and would leak into the rest of the test session."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, weakref
import conductor_mcp.service.service, conductor_mcp.models.litellm_backend  # what a server has loaded when it settles
from conductor_mcp.runtime.loop import FULL_COLLECTION_EVERY, settle_collector

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


YOUNG_PROBE = """
import gc, json, weakref
import conductor_mcp.service.service, conductor_mcp.models.litellm_backend
from conductor_mcp.runtime.loop import settle_collector

settle_collector()
young = gc.get_threshold()[0]
collections = []
gc.callbacks.append(lambda phase, info: phase == "stop" and collections.append(info["generation"]))
class Node: pass
a, b = Node(), Node()
a.peer, b.peer = b, a  # a cycle made while serving
alive = weakref.ref(a)
del a, b
runs = [{} for _ in range(young - 300)]  # what the runs in flight hold: short of `young` more objects alive
before = len(collections)
more = [{} for _ in range(600)]  # past it: a young collection, with no gc.collect() asked for
print(json.dumps({"young": young, "before": before, "after": collections, "cycle_freed": alive() is None}))
"""


@pytest.mark.slow  # a probe process
def test_settle_collector_makes_young_collections_rarer_and_they_still_free_cycles() -> None:
    """At Python's 700 a server collected every 2-3 HTTP runs, 0.3 ms of CPU per run (core/limits.py)."""
    probe = subprocess.run([sys.executable, "-c", YOUNG_PROBE], capture_output=True, text=True, timeout=120, check=True)
    state = json.loads(probe.stdout)
    assert state["young"] >= 10 * 700
    assert state["before"] == 0, state  # thousands of objects more alive than after the freeze: no collection yet
    assert state["after"] and state["cycle_freed"], state


EXIT_PROBE = """
import atexit, gc, json, sys
# registered before the command's own hooks, so it runs after them: what the interpreter's last collections walk
atexit.register(lambda: print(json.dumps({"left": len(gc.get_objects()), "frozen": gc.get_freeze_count()})))
from conductor_mcp.cli.commands import main
main(["--state-dir", sys.argv[1], "runs"])
"""


@pytest.mark.slow  # a probe process
def test_a_command_leaves_its_last_collections_nothing_to_walk(tmp_path) -> None:
    """The collections at interpreter exit walked every object imports made: `conductor-mcp run` lingered 5-7 s
    after printing its answer on a busy machine. A command freezes them at exit."""
    probe = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(tmp_path)], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert seen["frozen"] > 10_000 and seen["left"] < 100, seen
