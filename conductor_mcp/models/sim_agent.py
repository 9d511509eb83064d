"""The simulator's agent: a `command` agent for tests, run as `python -m conductor_mcp.models.sim_agent` (or by
path, with the standard library only). It reads its prompt on stdin, does what the prompt's `sim-agent` lines ask,
and prints what it did and an ANSWER line, like a sim worker.

    sim-agent write PATH: TEXT     write TEXT (with \\n for newlines) to PATH, relative, inside its directory
    sim-agent sleep SECONDS        sit there (a hung agent)
    sim-agent spawn SECONDS        leave a child sleeping in its own session (what a deadline must still kill)
    sim-agent fail CODE            quote its prompt on stderr (as agent CLIs do when they fail) and exit with CODE

It never runs anything the prompt says; a write it is refused (a read-only sandbox) is reported, not fatal.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

_LINE = re.compile(r"^\s*sim-agent (write|sleep|spawn|fail)\b\s*(.*)$", re.MULTILINE)


def _write(spec: str) -> str:
    path, _, text = spec.partition(":")
    target = Path(path.strip())
    if not path.strip() or target.is_absolute() or ".." in target.parts:
        return f"refused to write {path.strip()!r}: paths stay inside the workspace"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.strip().replace("\\n", "\n") + "\n", encoding="utf-8")
    except OSError as exc:
        return f"could not write {target}: {exc.strerror}"
    return f"wrote {target}"


def _spawn(seconds: str) -> str:
    sleeper = [sys.executable, "-c", f"import time; time.sleep({float(seconds)})"]
    child = subprocess.Popen(sleeper, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return f"left pid {child.pid} sleeping"


def main() -> int:
    prompt = sys.stdin.read()
    done = []
    for action, argument in _LINE.findall(prompt):
        if action == "write":
            done.append(_write(argument))
        elif action == "sleep":
            time.sleep(float(argument))
        elif action == "spawn":
            done.append(_spawn(argument))
        elif action == "fail":
            sys.stderr.write(f"sim-agent: the prompt was: {prompt[:1000]}\n")
            sys.stderr.write(f"sim-agent: failing as asked in {os.getcwd()}\n")
            return int(argument)
    sys.stdout.write("sim-agent did: " + ("; ".join(done) or "nothing") + "\nANSWER: done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
