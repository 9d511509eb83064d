"""The path of one run through the package: an `orchestrate` call made by the MCP SDK's client, in process, on
the simulator's pool, with every call into a package module recorded. Prints the modules visited in order (a
"stay" is a run of calls in one module), how many distinct modules, and how many moves climb back up the layers
(tools/architecture.py's folders; a climb is a move into a higher layer than the one before, such as a model's
answer going back to the engine).

    python tools/run_path.py [--show]

A measure of how far one request travels, to compare layouts side by side; it is not a benchmark of speed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from architecture import layer_of, room_of  # a sibling tool, not an installed module

from conductor_mcp.runtime.loop import prefer_bundled_price_map
from conductor_mcp.service.access import Front

prefer_bundled_price_map()  # before litellm loads

TASK = "Prove that the sum of two even numbers is even, step by step."


class PathRecorder:
    """Collects the sequence of package modules that calls enter (consecutive repeats collapsed)."""

    def __init__(self) -> None:
        self.stays: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("conductor_mcp.") and (not self.stays or self.stays[-1] != module):
            self.stays.append(module)


async def one_run(recorder: PathRecorder) -> str:
    from mcp.client import Client

    from conductor_mcp.config import Settings
    from conductor_mcp.doors.mcp.server import build_server
    from conductor_mcp.service.service import Service

    with tempfile.TemporaryDirectory() as state:
        settings = Settings.from_env(state_dir=Path(state), pool="sim")
        async with Service.open(settings) as service, Client(build_server(Front(service))) as client:
            await client.call_tool("orchestrate", {"task": TASK, "pool": "sim"})  # warm: imports, caches
            sys.setprofile(recorder)
            try:
                result = await client.call_tool("orchestrate", {"task": TASK, "pool": "sim"})
            finally:
                sys.setprofile(None)
    return str((result.structured_content or {}).get("status"))


def climbs(stays: list[str]) -> int:
    levels = [layer_of(room) if (room := room_of(m)) else None for m in stays]
    return sum(1 for a, b in itertools.pairwise(levels) if a is not None and b is not None and b > a)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print every stay in order")
    args = parser.parse_args()
    recorder = PathRecorder()
    status = asyncio.run(one_run(recorder))
    if args.show:
        for module in recorder.stays:
            print(f"  {module}")
    print(
        f"run {status}: {len(recorder.stays)} stays in {len(set(recorder.stays))} modules, "
        f"{climbs(recorder.stays)} climbs back up"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
