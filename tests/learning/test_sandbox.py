"""The code sandbox: what model-written code can see and do under bubblewrap, the limits, the refusal to run it
without bubblewrap, and the explicit unsafe opt-in."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conductor_mcp.learning import sandbox
from conductor_mcp.learning.code_checks import check_code, code_sandbox_problem
from conductor_mcp.learning.sandbox import Limits, SandboxUnavailable, run_python
from conductor_mcp.learning.verifiers import verify
from tests.conftest import processes_with

needs_bwrap = pytest.mark.skipif(
    sandbox.bwrap_path() is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)


@contextmanager
def sleepers(count: int) -> Iterator[None]:
    """`count` idle processes of the host user the sandbox's processes run as (uid 65534 for a root caller)."""
    user = sandbox.SANDBOX_UID if os.geteuid() == 0 else None
    procs = [subprocess.Popen(["sleep", "30"], user=user) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------- without bubblewrap


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)


@pytest.mark.usefixtures("no_bwrap")
def test_without_bwrap_model_code_is_refused_and_the_error_names_the_fix() -> None:
    with pytest.raises(SandboxUnavailable, match=r"apt-get install bubblewrap.*allow_unsafe_local_exec"):
        run_python("print(1)", timeout_s=5)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_code("def f():\n    return 1", "assert f() == 1")
    code_task = {"id": "c", "type": "code", "tests": "assert f() == 1"}
    with pytest.raises(SandboxUnavailable, match="--unsafe-local-exec"):
        verify(code_task, "def f():\n    return 1")
    assert verify({"id": "n", "type": "numeric", "answer": "2"}, "ANSWER: 2")  # nothing to run: no refusal
    assert "apt-get install bubblewrap" in (code_sandbox_problem([code_task]) or "")
    assert code_sandbox_problem([code_task], allow_unsafe_local_exec=True) is None
    assert code_sandbox_problem([{"id": "n", "type": "numeric", "answer": "2"}]) is None


def test_a_bwrap_that_cannot_run_is_reported_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/bin/false")
    assert "bubblewrap cannot run a sandbox here" in (sandbox.sandbox_problem() or "")
    with pytest.raises(SandboxUnavailable):
        run_python("print(1)", timeout_s=5)


@pytest.mark.usefixtures("no_bwrap")
def test_the_unsafe_opt_in_still_runs_code_apart_with_limits(tmp_path: Path) -> None:
    seen = run_python(
        "import json, os\nprint(json.dumps({'env': sorted(os.environ), 'cwd': os.getcwd()}))",
        timeout_s=10,
        allow_unsafe_local_exec=True,
    )
    report = json.loads(seen.stdout)
    assert seen.exit_code == 0 and set(report["env"]) <= {"LC_CTYPE"}  # none of the caller's variables
    assert report["cwd"] != os.getcwd() and not Path(report["cwd"]).exists()  # its own directory, removed after
    hog = run_python(
        "blob = bytearray(2 * 1024**3)", timeout_s=10, limits=Limits(memory_mb=256), allow_unsafe_local_exec=True
    )
    assert hog.exit_code != 0 and "MemoryError" in hog.stderr
    marker = tmp_path / "late"  # a background child in its process group dies with it at the deadline
    started = time.monotonic()
    stuck = run_python(
        f"import os, time\nif os.fork() == 0:\n    time.sleep(2)\n    open({str(marker)!r}, 'w').write('x')\n"
        "    os._exit(0)\nwhile True:\n    pass\n",
        timeout_s=1,
        allow_unsafe_local_exec=True,
    )
    assert stuck.timed_out and stuck.exit_code is None and time.monotonic() - started < 5
    time.sleep(2.5)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ under bubblewrap


PROBE = """
import ctypes, json, os, socket
report = {"uid": os.getuid(), "groups": os.getgroups(), "env": sorted(os.environ), "root": sorted(os.listdir("/")),
          "tmp": os.listdir("/tmp"), "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
          "status": {k: v.strip() for k, v in (line.split(":", 1) for line in open("/proc/self/status"))
                     if k in ("CapEff", "CapPrm", "CapAmb", "NoNewPrivs")},
          "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
    report["network"] = "connected"
except OSError as exc:
    report["network"] = str(exc)
report["new_userns"] = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)  # CLONE_NEWUSER
for path in ("/", "/usr/x", "/dev/x", "/tmp/x", "x"):
    try:
        open(path if path != "/" else "/x", "w").close()
        report[path] = "written"
    except OSError as exc:
        report[path] = exc.strerror
print(json.dumps(report))
"""


@needs_bwrap
def test_the_sandbox_sees_nothing_of_the_host_and_reaches_nothing() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        run = run_python(PROBE.replace("PORT", str(port)), files={"data.txt": "x"}, timeout_s=20)
    assert run.exit_code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["uid"] == 65534 and report["groups"] in ([], [65534])
    assert report["status"] == {"CapPrm": "0" * 16, "CapEff": "0" * 16, "CapAmb": "0" * 16, "NoNewPrivs": "1"}
    assert set(report["env"]) <= {"LC_CTYPE", "PWD"}
    # /tmp is private and empty, bar the read-only interpreter when it lives under /tmp (a CI checkout there)
    interpreter_in_tmp = sorted({Path(d).parts[2] for d in sandbox.interpreter_dirs() if d.startswith("/tmp/")})
    assert not {"etc", "home", "var", "run"} & set(report["root"]) and report["tmp"] == interpreter_in_tmp
    assert report["cwd"] == "/sandbox" and report["files"] == ["data.txt", "main.py"]
    assert len(report["pids"]) <= 2  # bwrap's init and itself: no host process is visible
    assert "connected" not in report["network"] and report["new_userns"] == -1
    assert report["/"] == report["/usr/x"] == report["/dev/x"] == "Read-only file system"
    assert report["/tmp/x"] == report["x"] == "written"


@needs_bwrap
def test_limits_hold_inside_the_sandbox() -> None:
    small = Limits(memory_mb=256, file_mb=1, tmpfs_mb=8)
    big_file = run_python("open('/tmp/f', 'wb').write(b'x' * 2 * 1024**2)", timeout_s=10, limits=small)
    assert big_file.exit_code != 0 and big_file.stdout == ""
    memory = run_python("blob = bytearray(1024**3)", timeout_s=10, limits=small)
    assert memory.exit_code != 0 and "MemoryError" in memory.stderr
    flood = run_python("print('x' * 4 * 1024**2)", timeout_s=10, limits=small)  # stdout is a file too
    assert flood.exit_code != 0 and len(flood.stdout) <= 1024**2
    full = run_python(
        "import os\nfor i in range(20):\n    open(f'/tmp/{i}', 'wb').write(b'x' * 1024**2)", timeout_s=10, limits=small
    )
    assert full.exit_code != 0 and "No space left on device" in full.stderr
    started = time.monotonic()
    slow = run_python("import time\ntime.sleep(60)", timeout_s=1)
    assert slow.timed_out and slow.exit_code is None and time.monotonic() - started < 5


@needs_bwrap
def test_the_process_cap_counts_only_the_sandboxs_processes() -> None:
    forks = (
        "import os, time\nchildren = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
        "    children += 1\nprint(children)\n"
    )
    with sleepers(100):  # the same host user already runs 100 processes: the sandbox still gets its own count
        run = run_python(forks, timeout_s=20, limits=Limits(processes=16))
    assert run.exit_code == 0, run.stderr
    assert 8 <= int(run.stdout) < 16  # bwrap's init and the program itself count too


@needs_bwrap
def test_a_fork_bomb_is_bounded_and_stopped() -> None:
    started = time.monotonic()
    bomb = run_python(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout_s=2
    )
    assert bomb.timed_out and time.monotonic() - started < 10


@needs_bwrap
def test_detached_processes_die_when_the_program_exits() -> None:
    token = f"conductor-orphan-{os.getpid()}-{time.monotonic_ns()}"
    orphan = (
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {token!r}])\n"
        "    os._exit(0)\nimport time\ntime.sleep(0.5)\n"
    )
    try:
        run = run_python(orphan, timeout_s=10)
        assert run.exit_code == 0, run.stderr
        time.sleep(0.2)
        assert processes_with(token) == []
    finally:
        for pid in processes_with(token):
            os.kill(pid, 9)
