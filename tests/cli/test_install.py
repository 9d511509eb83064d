"""`conductor-mcp install HOST`: the host's own config file, checked by the real Claude Code (`claude mcp list`
starts our stdio server and reports it healthy; over HTTP it must send the token from the environment) and the
real Codex CLI (`codex mcp get`), and by reading what was written for Claude Desktop, Cursor and VS Code.
Every HOME here is a temporary directory; nothing touches the real one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conductor_mcp.cli.install import server_command
from conductor_mcp.core.limits import HOST_TOOL_TIMEOUT_S
from tests.conftest import HttpServer

CLAUDE = os.environ.get("CONDUCTOR_CLAUDE_BIN") or shutil.which("claude")
CODEX = os.environ.get("CONDUCTOR_CODEX_BIN") or shutil.which("codex")
SECRET = "sk-test-never-written-anywhere"
TOKEN = "install-test-token"
needs_claude = pytest.mark.skipif(CLAUDE is None and not os.environ.get("CI"), reason="Claude Code not installed")
needs_codex = pytest.mark.skipif(CODEX is None and not os.environ.get("CI"), reason="Codex CLI not installed")


@pytest.fixture
def home() -> Iterator[Path]:
    """A HOME outside /tmp (Codex treats /tmp specially), removed afterwards."""
    cache = Path.home() / ".cache"
    cache.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="conductor-install-test-", dir=cache))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def host_env(home: Path, **extra: str) -> dict[str, str]:
    hidden = ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "APPDATA")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    return {**env, "HOME": str(home), "OPENAI_API_KEY": SECRET, **extra}


def install(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "install", *args],
        capture_output=True,
        text=True,
        env=host_env(home),
        cwd=cwd or home,
        timeout=120,
    )


def installed(home: Path, *args: str) -> str:
    result = install(home, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def claude(home: Path, *args: str, **env: str) -> str:
    assert CLAUDE, "CI must install Claude Code (see .ci/run)"
    quiet = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    result = subprocess.run(
        [CLAUDE, *args],
        capture_output=True,
        text=True,
        env=host_env(home, **quiet, **env),
        cwd=home,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    return result.stdout + result.stderr


def entry(path: Path, table: str, name: str = "conductor") -> dict[str, Any]:
    return json.loads(path.read_text())[table][name]


@needs_claude
@pytest.mark.slow
@pytest.mark.external
def test_claude_code_starts_the_installed_server_and_finds_it_healthy(home: Path) -> None:
    out = installed(home, "claude-code", "--pool", "sim")
    written = entry(home / ".claude.json", "mcpServers")
    assert written["command"] == server_command()[0] and Path(written["command"]).is_absolute()
    assert written["env"]["CONDUCTOR_POOL"] == "sim" and written["timeout"] == HOST_TOOL_TIMEOUT_S * 1000
    assert "claude mcp list" in out
    listing = claude(home, "mcp", "list")
    assert "conductor:" in listing and "Connected" in listing, listing  # it ran our server's MCP handshake


@needs_claude
@pytest.mark.slow
@pytest.mark.external
def test_claude_code_reaches_the_http_form_with_the_token_from_its_environment(home: Path, tmp_path: Path) -> None:
    server = HttpServer(tmp_path / "state", CONDUCTOR_HTTP_TOKEN=TOKEN)
    try:
        installed(home, "claude-code", "--http", "--url", server.url, "--name", "conductor-http")
        written = entry(home / ".claude.json", "mcpServers", "conductor-http")
        assert written == {
            "type": "http",
            "url": server.url,
            "timeout": HOST_TOOL_TIMEOUT_S * 1000,
            "headers": {"Authorization": "Bearer ${CONDUCTOR_HTTP_TOKEN}"},
        }
        assert "Connected" in claude(home, "mcp", "list", CONDUCTOR_HTTP_TOKEN=TOKEN)
        refused = claude(home, "mcp", "list", CONDUCTOR_HTTP_TOKEN="a-wrong-token")
        assert "conductor-http:" in refused and "Connected" not in refused, refused  # the header really is sent
    finally:
        server.stop()


@needs_codex
@pytest.mark.slow
@pytest.mark.external
def test_codex_lists_the_installed_server_and_keeps_the_rest_of_its_config(home: Path) -> None:
    assert CODEX, "CI must install Codex CLI (see .ci/run)"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('# my settings\nmodel = "o3"  # keep me\n\n[mcp_servers.other]\ncommand = "other-server"\n')
    installed(home, "codex", "--pool", "frontier")
    installed(home, "codex", "--http", "--name", "conductor-http")
    text = config.read_text()
    assert text.startswith('# my settings\nmodel = "o3"  # keep me\n') and SECRET not in text
    env = host_env(home, CODEX_HOME=str(config.parent))
    listing = subprocess.run([CODEX, "mcp", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert listing.returncode == 0 and "conductor" in listing.stdout and "other" in listing.stdout, listing.stderr
    got = subprocess.run([CODEX, "mcp", "get", "conductor", "--json"], capture_output=True, text=True, env=env)
    server = json.loads(got.stdout)
    assert server["transport"]["command"] == server_command()[0] and server["transport"]["args"] == ["serve"]
    assert server["transport"]["env"] == {"CONDUCTOR_POOL": "frontier"}
    assert set(server["transport"]["env_vars"]) >= {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}  # names, not values
    assert server["tool_timeout_sec"] == HOST_TOOL_TIMEOUT_S and server["startup_timeout_sec"] >= 30
    got = subprocess.run([CODEX, "mcp", "get", "conductor-http", "--json"], capture_output=True, text=True, env=env)
    assert json.loads(got.stdout)["transport"]["bearer_token_env_var"] == "CONDUCTOR_HTTP_TOKEN"
    assert tomllib.loads(text)["mcp_servers"]["other"] == {"command": "other-server"}


JSON_HOSTS = {  # host: (its file under HOME, the table of servers, how it names a variable)
    "claude-desktop": (".config/Claude/claude_desktop_config.json", "mcpServers", None),
    "cursor": (".cursor/mcp.json", "mcpServers", "${env:OPENAI_API_KEY}"),
    "vscode": (".config/Code/User/mcp.json", "servers", "${env:OPENAI_API_KEY}"),
}


@pytest.mark.parametrize("host", sorted(JSON_HOSTS))
def test_json_hosts_get_the_command_pool_and_key_names(home: Path, host: str) -> None:
    relative, table, reference = JSON_HOSTS[host]
    path = home / relative
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"theme": "dark", table: {"other": {"command": "other-server"}}}))
    out = installed(home, host, "--pool", "frontier")
    document = json.loads(path.read_text())
    assert document["theme"] == "dark" and document[table]["other"] == {"command": "other-server"}
    written = document[table]["conductor"]
    assert written["command"] == server_command()[0] and written["args"] == ["serve"]
    assert written["env"]["CONDUCTOR_POOL"] == "frontier" and SECRET not in path.read_text()
    assert written["env"].get("OPENAI_API_KEY") == reference
    if host == "claude-desktop":
        assert "OPENAI_API_KEY" in out and "never writes key values" in out  # the user is told what to add
    assert (written.get("type") == "stdio") is (host == "vscode")


@pytest.mark.parametrize("host", ["cursor", "vscode", "claude-code"])
def test_project_configs_go_in_the_project(home: Path, tmp_path: Path, host: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    installed(home, host, "--project", str(project))
    relative = {"cursor": ".cursor/mcp.json", "vscode": ".vscode/mcp.json", "claude-code": ".mcp.json"}[host]
    assert entry(project / relative, "servers" if host == "vscode" else "mcpServers")["env"]["CONDUCTOR_POOL"] == "sim"
    assert not (home / relative).exists()
    assert "no per-project" in install(home, "codex", "--project", str(project)).stderr


def test_another_entry_is_kept_without_force(home: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    installed(home, "cursor", "--pool", "sim")
    before = path.read_text()
    assert "as it would be written" in installed(home, "cursor", "--pool", "sim")  # the same again: nothing to do
    refused = install(home, "cursor", "--pool", "frontier")
    assert refused.returncode == 2 and "--force" in refused.stderr and "pool sim" in refused.stderr
    assert path.read_text() == before
    assert "replaced" in installed(home, "cursor", "--pool", "frontier", "--force")
    assert entry(path, "mcpServers")["env"]["CONDUCTOR_POOL"] == "frontier"


def test_dry_run_prints_the_entry_and_writes_nothing(home: Path) -> None:
    out = installed(home, "vscode", "--dry-run")
    assert f"would write to {home / '.config/Code/User/mcp.json'}" in out
    printed = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert printed["servers"]["conductor"]["command"] == server_command()[0]
    assert not (home / ".config").exists()


@pytest.mark.parametrize("host", ["cursor", "vscode"])
def test_http_form_names_the_token_variable(home: Path, host: str) -> None:
    installed(home, host, "--http", "--url", "http://127.0.0.1:9999/mcp")
    path = home / JSON_HOSTS[host][0]
    written = entry(path, JSON_HOSTS[host][1])
    assert written["url"] == "http://127.0.0.1:9999/mcp" and "command" not in written
    assert written["headers"] == {"Authorization": "Bearer ${env:CONDUCTOR_HTTP_TOKEN}"}
    installed(home, host, "--http", "--no-auth", "--name", "open")
    assert "headers" not in entry(path, JSON_HOSTS[host][1], "open")


def test_what_cannot_be_written_is_refused_and_left_alone(home: Path) -> None:
    assert "Connectors" in install(home, "claude-desktop", "--http").stderr
    path = home / ".config" / "Code" / "User" / "mcp.json"
    path.parent.mkdir(parents=True)
    path.write_text('{\n  // my servers\n  "servers": {}\n}\n')  # VS Code allows comments; plain JSON does not
    refused = install(home, "vscode")
    assert refused.returncode == 2 and "comments?" in refused.stderr and "--dry-run" in refused.stderr
    assert path.read_text().startswith("{\n  // my servers")
    assert "unknown pool" in install(home, "cursor", "--pool", "no-such-pool").stderr


def test_a_link_planted_where_the_old_temporary_file_went_is_not_written_through(home: Path, tmp_path: Path) -> None:
    user_config = home / ".claude.json"
    user_config.write_text('{"mine": true}\n')
    user_config.chmod(0o644)
    clone = tmp_path / "clone"
    clone.mkdir()
    planted = clone / "..mcp.json.conductor-mcp.tmp"
    planted.symlink_to(user_config)
    installed(home, "claude-code", "--project", str(clone))
    assert user_config.read_text() == '{"mine": true}\n' and user_config.stat().st_mode & 0o777 == 0o644
    assert planted.is_symlink() and not (clone / ".mcp.json").is_symlink()
    assert entry(clone / ".mcp.json", "mcpServers")["env"]["CONDUCTOR_POOL"] == "sim"
    assert sorted(p.name for p in clone.iterdir()) == ["..mcp.json.conductor-mcp.tmp", ".mcp.json"]  # no leftovers


@pytest.mark.parametrize(
    ("host", "link", "to"),
    [("claude-code", ".mcp.json", ".claude.json"), ("cursor", ".cursor", ".cursor"), ("vscode", ".vscode", "code")],
)
def test_a_project_config_reached_through_a_link_is_refused(
    home: Path, tmp_path: Path, host: str, link: str, to: str
) -> None:
    target = home / to
    if link == ".mcp.json":
        target.write_text('{"mine": true}\n')
    else:
        target.mkdir()
    before = sorted((p.name, p.read_text()) for p in [target, *target.glob("*")] if p.is_file())
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / link).symlink_to(target)
    refused = install(home, host, "--project", str(clone))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip() == refused.stderr.strip().splitlines()[0]  # one line
    assert f"{clone / link}: is a symbolic link" in refused.stderr and "--config" in refused.stderr
    assert sorted((p.name, p.read_text()) for p in [target, *target.glob("*")] if p.is_file()) == before
    assert (clone / link).is_symlink()


@pytest.mark.parametrize(
    ("host", "name", "content", "problem"),
    [
        ("cursor", "mcp.json", b'{"mcpServers": {', "not plain JSON"),
        ("cursor", "mcp.json", b'\xff\xfe{"mcpServers": {}}', "not UTF-8 text"),
        ("cursor", "mcp.json", b"[1, 2]", "holds a list, not a JSON object"),
        ("cursor", "mcp.json", b'{"mcpServers": null}', "'mcpServers' is null, not a table of servers"),
        ("vscode", "mcp.json", b'{"servers": ["conductor"]}', "'servers' is a list, not a table of servers"),
        ("cursor", "mcp.json", b'{"mcpServers": {"conductor": 5}}', "server 'conductor' in 'mcpServers' is a number"),
        ("codex", "config.toml", b"model = [", "not valid TOML"),
        ("codex", "config.toml", b"mcp_servers = 1", "'mcp_servers' is a number, not a table of servers"),
        ("codex", "config.toml", b"[[mcp_servers]]\ncommand = 'x'", "'mcp_servers' is a list, not a table"),
        ("codex", "config.toml", b"[mcp_servers]\nconductor = 'x'", "server 'conductor' in 'mcp_servers' is a string"),
    ],
)
def test_a_malformed_config_is_one_error_line_naming_the_file(
    home: Path, host: str, name: str, content: bytes, problem: str
) -> None:
    path = home / "configs" / name
    path.parent.mkdir()
    path.write_bytes(content)
    refused = install(home, host, "--config", str(path))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"conductor-mcp: error: {path}: {problem}"), refused.stderr
    assert path.read_bytes() == content


def test_codex_servers_written_as_an_inline_table_get_the_entry_inline(home: Path) -> None:
    path = home / "configs" / "config.toml"
    path.parent.mkdir()
    path.write_text('mcp_servers = { other = { command = "other-server" } }\n')
    installed(home, "codex", "--config", str(path))
    servers = tomllib.loads(path.read_text())["mcp_servers"]
    assert servers["other"] == {"command": "other-server"} and servers["conductor"]["args"] == ["serve"]


def test_install_compiles_the_package_so_starts_read_bytecode(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, nothing else would write the cache the host's starts need."""
    import importlib.util

    import conductor_mcp.service.service as a_module

    cache = tmp_path / "bytecode"
    env = {**host_env(home), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(cache)}
    argv = [sys.executable, "-m", "conductor_mcp", "install", "cursor"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "byte-compile" not in result.stdout
    monkeypatch.setattr(sys, "pycache_prefix", str(cache))  # where the server's interpreter looks for it
    assert Path(importlib.util.cache_from_source(a_module.__file__)).is_file()  # install wrote it: Python would not
