"""Closing litellm's sessions at the end of a CLI run costs what it closes, nothing more."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import asyncio, sys
from conductor_mcp.models.litellm_backend import close_clients
before = set(sys.modules)
asyncio.run(close_clients())
print("\\n".join(sorted(set(sys.modules) - before)))
"""


def test_close_clients_imports_nothing_more() -> None:
    """The scan for litellm transports must not touch the openai SDK's lazy module proxies: `isinstance` on one
    reads its `__class__`, which imports the module it stands for (1,130 modules, 1.3-4 s of CPU at the end of
    every `conductor-mcp run`)."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True)
    loaded = [name for name in result.stdout.split() if name.startswith("openai.")]
    assert loaded == [], loaded[:10]
