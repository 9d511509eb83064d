"""Measure the package's shape from its source: modules, import cycles, the import rules between its folders,
import depth, what core/ may touch, and the longest functions. Reads files only (ast); imports nothing from the
package.

    python tools/architecture.py [PACKAGE_DIR]      # default: conductor_mcp next to this folder

The folders are the layers. `REACH` says, for each folder, which others its modules may import; nothing else is
allowed, so each forbidden import is named by its kind: upward (into a higher layer), sideways (into a sibling on the
same layer: models, runs, agents and telemetry do not know each other), or past the service (a door or the CLI
reaching below the service, to the engine, models, runs, agents or telemetry). Imports under `if TYPE_CHECKING:`
count too: an annotation that points up or round in a circle is the same coupling. Learning sits on top, beside
nothing that serves requests. core/ holds data and pure functions: it imports nothing that does I/O or reads the
environment, and calls no `open`, `print` or `input`. Modules are sized by their idea, so no line count is enforced;
functions longer than `MAX_FUNCTION_LINES` are refused.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Folders (or root modules) lowest first; a package's root __init__ is its public face and may import anything.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("core",),
    ("config",),
    ("runtime",),
    ("models", "runs", "agents", "telemetry"),
    ("engine",),
    ("service",),
    ("doors",),
    ("learning",),
    ("cli", "__main__"),
)
_BASE = frozenset({"core", "runtime", "errors", "config"})
_MEMBERS = frozenset({"models", "runs", "agents", "telemetry"})
# Which folders each folder may import (its own always).
REACH: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "config": frozenset({"errors", "core"}),  # core/limits.py holds the settings' built-in defaults
    "runtime": frozenset({"errors", "core", "config"}),
    "core": frozenset({"errors"}),
    **{member: _BASE for member in _MEMBERS},
    "engine": _BASE | _MEMBERS,
    "service": _BASE | _MEMBERS | {"engine"},
    "doors": _BASE | {"service"},
    "learning": _BASE | _MEMBERS | {"engine", "service"},
    "cli": _BASE | {"service", "doors"},
    "__main__": frozenset({"cli"}),
}
# The service's modules a door may not import: the raw service and reader, whose run operations check no
# principal. A door holds service/access.py's `Front` instead, so the access check cannot be forgotten.
BEHIND_THE_FRONT = frozenset({"service.service", "service.reader"})
# What core/ may not import: modules that do I/O, start work, keep time-dependent state, or read the environment.
CORE_FORBIDDEN = frozenset(
    {
        "os",
        "sys",
        "io",
        "subprocess",
        "socket",
        "shutil",
        "tempfile",
        "pathlib",
        "logging",
        "structlog",
        "asyncio",
        "threading",
        "sqlite3",
        "httpx",
        "litellm",
        "psycopg",
        "conductor_mcp.config",
        "conductor_mcp.runtime",
    }
)
CORE_FORBIDDEN_CALLS = {"open", "print", "input"}
MAX_FUNCTION_LINES = 60
# The function limit counts lines as the formatter writes them: a formatter opt-out that packs code defeats it.
FORMATTER_OPT_OUT = re.compile(r"#\s*fmt:\s*(skip|off)\b")


@dataclass
class Shape:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, set[str]] = field(default_factory=dict)  # of the package's own modules
    external: dict[str, set[str]] = field(default_factory=dict)  # every imported name, the package's included
    calls: dict[str, set[str]] = field(default_factory=dict)  # names of plain functions called
    functions: list[tuple[int, str]] = field(default_factory=list)  # (lines, "module:function")


def module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.Module, name: str) -> set[str]:
    """Every module name an import statement names (relative ones made absolute), annotation-only ones included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(name.split(".")[: -node.level] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def measure(package: Path) -> Shape:
    shape = Shape()
    for path in sorted(package.rglob("*.py")):
        shape.modules[module_name(package, path)] = path
    names = set(shape.modules)
    for name, path in shape.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = _imported(tree, name)
        shape.external[name] = found
        shape.imports[name] = {m for m in found if m in names and m != name and m != package.name}
        shape.calls[name] = {
            node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                shape.functions.append((length, f"{name}:{node.name}"))
    return shape


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in imports.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in imports:
        if node not in index:
            visit(node)
    return found


def room_of(module: str) -> str | None:
    """The folder (or root module) a module lives in; None for the package's root __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_of(room: str) -> int | None:
    for level, rooms in enumerate(LAYERS):
        if room in rooms:
            return level
    return None


def forbidden(imports: dict[str, set[str]]) -> dict[str, list[str]]:
    """Every import REACH does not allow, by kind: upward, sideways, past the service; and a door importing what
    is behind the service's front."""
    found: dict[str, list[str]] = {"upward": [], "sideways": [], "past the service": [], "behind the front": []}
    for source, targets in sorted(imports.items()):
        room = room_of(source)
        if room is None or room not in REACH:
            continue
        for target in sorted(targets):
            other = room_of(target)
            if room == "doors" and target.split(".", 1)[-1] in BEHIND_THE_FRONT:
                found["behind the front"].append(f"{source} -> {target}")
            if other is None or other == room or other in REACH[room] or other not in REACH:
                continue
            low, high = layer_of(room), layer_of(other)
            kind = "upward" if (high or 0) > (low or 0) else "sideways" if high == low else "past the service"
            found[kind].append(f"{source} -> {target}")
    return found


def impure_core(shape: Shape, package: str) -> list[str]:
    """core/ modules that import something that does I/O or reads the environment, or call open/print/input."""
    found = []
    for module in sorted(shape.modules):
        if not module.startswith(f"{package}.core"):
            continue
        imported = shape.external[module]
        for bad in sorted(CORE_FORBIDDEN):
            if any(name == bad or name.startswith(f"{bad}.") for name in imported):
                found.append(f"{module} imports {bad}")
        for bad in sorted(shape.calls[module] & CORE_FORBIDDEN_CALLS):
            found.append(f"{module} calls {bad}()")
    return found


def depth(imports: dict[str, set[str]]) -> int:
    """The longest chain of imports, in modules (1 for a module that imports nothing of the package)."""
    memo: dict[str, int] = {}

    def longest(node: str, trail: frozenset[str]) -> int:
        if node in memo:
            return memo[node]
        below = [longest(t, trail | {node}) for t in imports.get(node, ()) if t not in trail]
        memo[node] = 1 + max(below, default=0)
        return memo[node]

    return max((longest(m, frozenset()) for m in imports), default=0)


def report(package: Path) -> tuple[str, bool]:
    """The measures as text, and whether every rule holds."""
    shape = measure(package)
    found_cycles, found = cycles(shape.imports), forbidden(shape.imports)
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in shape.modules.items()}
    largest = max(lines.items(), key=lambda item: item[1], default=("-", 0))
    long_functions = sorted((f for f in shape.functions if f[0] > MAX_FUNCTION_LINES), reverse=True)
    longest = max(shape.functions, default=(0, "-"))
    rooms = {room_of(m) for m in shape.modules} - {None}
    unlayered = sorted(m for m in shape.modules if (room := room_of(m)) is not None and room not in REACH)
    impure = impure_core(shape, package.name)
    sources = {name: path.read_text(encoding="utf-8") for name, path in shape.modules.items()}
    opt_outs = sorted(name for name, source in sources.items() if FORMATTER_OPT_OUT.search(source))
    layers = [
        "  "
        + "  |  ".join(f"{room} ({sum(room_of(m) == room for m in shape.modules)})" for room in level if room in rooms)
        for level in reversed(LAYERS)
    ]
    text = [
        f"modules: {len(shape.modules)} in {len(rooms)} folders and root modules; layers, top first:",
        *layers,
        f"import depth: {depth(shape.imports)} modules",
        f"import cycles: {len(found_cycles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found_cycles),
        *(f"imports {kind}: {len(edges)}" + "".join(f"\n  {edge}" for edge in edges) for kind, edges in found.items()),
        f"modules outside the layers: {len(unlayered)}" + "".join(f"\n  {m}" for m in unlayered),
        f"core modules doing I/O or reading the environment: {len(impure)}" + "".join(f"\n  {m}" for m in impure),
        f"largest module: {largest[0]} ({largest[1]} lines)",
        f"longest function: {longest[1]} ({longest[0]} lines); over {MAX_FUNCTION_LINES}: "
        + (", ".join(f"{name} ({n})" for n, name in long_functions) or "none"),
        f"modules with formatter opt-outs (fmt: skip/off): {len(opt_outs)}" + "".join(f"\n  {m}" for m in opt_outs),
    ]
    ok = not (found_cycles or any(found.values()) or unlayered or impure or long_functions or opt_outs)
    return "\n".join(text), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("package", nargs="?", type=Path, default=Path(__file__).parents[1] / "conductor_mcp")
    args = parser.parse_args(argv)
    text, ok = report(args.package.resolve())
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
