"""Every limit and default is written once, in core/limits.py (or as a setting in config.py): a module-level number
anywhere else fails here unless tests/core/limits_allowlist.txt names it as not a limit, with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "conductor_mcp"
ALLOWLIST = Path(__file__).with_name("limits_allowlist.txt")
# Where limits may be written: the limits module, the settings, and the harness that runs alone in the sandbox (its
# text is the program, so it cannot import them).
HOMES = {"conductor_mcp/core/limits.py", "conductor_mcp/config.py", "conductor_mcp/learning/harness.py"}


def _is_number(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        return isinstance(value.value, int | float) and not isinstance(value.value, bool)
    if isinstance(value, ast.BinOp):
        return _is_number(value.left) and _is_number(value.right)
    if isinstance(value, ast.UnaryOp):
        return _is_number(value.operand)
    return isinstance(value, ast.Name) and value.id.isupper()


def module_numbers(source: str) -> list[str]:
    """The module-level UPPER_CASE names bound to a number (or to arithmetic on numbers and constants)."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        if name.lstrip("_").isupper() and _is_number(value):
            found.append(name)
    return found


def _allowlist() -> set[str]:
    lines = (line.split("#")[0].strip() for line in ALLOWLIST.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line}


def _numbers_outside_the_homes() -> set[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module not in HOMES:
            found |= {f"{module}:{name}" for name in module_numbers(path.read_text(encoding="utf-8"))}
    return found


def test_every_limit_lives_in_the_limits_module() -> None:
    strays = sorted(_numbers_outside_the_homes() - _allowlist())
    assert not strays, "limits written outside core/limits.py (move them there, or allow-list what is no limit):\n" + (
        "\n".join(strays)
    )


def test_the_allowlist_names_only_what_exists() -> None:
    stale = sorted(_allowlist() - _numbers_outside_the_homes())
    assert not stale, f"allow-listed but gone: {stale}"


def test_a_new_limit_outside_the_module_is_found() -> None:
    source = "from __future__ import annotations\n\nMAX_THINGS = 4 * 1024\nNAME = 'x'\n_CHUNK = 2**16\n"
    assert module_numbers(source) == ["MAX_THINGS", "_CHUNK"]
