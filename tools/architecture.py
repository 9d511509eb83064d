"""Measure the package's shape from its source: modules, import cycles, upward imports, import depth, what core/
may touch, and the longest modules and functions. Reads files only (ast); imports nothing from the package.

    python tools/architecture.py [PACKAGE_DIR]      # default: conductor_mcp next to this folder

Layers, lowest first: a module may import from its own layer and the ones below, never from above. Imports under
`if TYPE_CHECKING:` count too: an annotation that points up or round in a circle is the same coupling. The doors
and learning are separate layers, learning on top, so nothing that serves requests imports the training code.
core/ holds data and pure functions: it imports nothing that does I/O or reads the environment, and calls no
`open`, `print` or `input`.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "config", "runtime"),
    ("logs", "lifetimes", "isolation", "private"),
    ("core",),
    ("models", "runs", "agents", "telemetry"),
    ("engine",),
    ("pools", "reader", "service", "context_files", "tokens", "access"),
    ("doors",),
    ("learning",),
    (
        "cli",
        "__main__",
        "cli_breakdown",
        "cli_output",
        "cli_progress",
        "cli_serve",
        "cli_tokens",
        "hosts",
        "host_config",
    ),
)
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
        "conductor_mcp.logs",
    }
)
CORE_FORBIDDEN_CALLS = {"open", "print", "input"}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# The size limits count lines as the formatter writes them: a formatter opt-out that packs code defeats them.
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


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    room = parts[1] if len(parts) > 1 else parts[0]
    for level, rooms in enumerate(LAYERS):
        if room in rooms:
            return level
    return None


def upward(imports: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in sorted(imports.items()):
        for target in sorted(targets):
            low, high = layer_of(source), layer_of(target)
            if low is not None and high is not None and high > low:
                found.append(f"{source} -> {target}")
    return found


def impure_core(shape: Shape, package: str) -> list[str]:
    """core/ modules that import something that does I/O or reads the environment, or call open/print/input."""
    found = []
    for module in sorted(shape.modules):
        if not module.startswith(f"{package}.core"):
            continue
        roots = {name for name in shape.external[module]} | {name.split(".")[0] for name in shape.external[module]}
        for bad in sorted(roots & CORE_FORBIDDEN):
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
    """The measures as text, and whether every target holds."""
    shape = measure(package)
    found_cycles, found_upward = cycles(shape.imports), upward(shape.imports)
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in shape.modules.items()}
    big_modules = sorted(((n, name) for name, n in lines.items() if n > MAX_MODULE_LINES), reverse=True)
    long_functions = sorted((f for f in shape.functions if f[0] > MAX_FUNCTION_LINES), reverse=True)
    longest = max(shape.functions, default=(0, "-"))
    unlayered = sorted(m for m in shape.modules if layer_of(m) is None and m != package.name)
    impure = impure_core(shape, package.name)
    sources = {name: path.read_text(encoding="utf-8") for name, path in shape.modules.items()}
    opt_outs = sorted(name for name, source in sources.items() if FORMATTER_OPT_OUT.search(source))
    text = [
        f"modules: {len(shape.modules)}",
        f"import depth: {depth(shape.imports)} modules",
        f"import cycles: {len(found_cycles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found_cycles),
        f"upward imports: {len(found_upward)}" + "".join(f"\n  {u}" for u in found_upward),
        f"modules outside the layers: {len(unlayered)}" + "".join(f"\n  {m}" for m in unlayered),
        f"core modules doing I/O or reading the environment: {len(impure)}" + "".join(f"\n  {m}" for m in impure),
        f"largest module: {max(lines.values())} lines; over {MAX_MODULE_LINES}: "
        + (", ".join(f"{name} ({n})" for n, name in big_modules) or "none"),
        f"longest function: {longest[1]} ({longest[0]} lines); over {MAX_FUNCTION_LINES}: "
        + (", ".join(f"{name} ({n})" for n, name in long_functions) or "none"),
        f"modules with formatter opt-outs (fmt: skip/off): {len(opt_outs)}" + "".join(f"\n  {m}" for m in opt_outs),
    ]
    ok = not (found_cycles or found_upward or unlayered or impure or big_modules or long_functions or opt_outs)
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
