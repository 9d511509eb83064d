"""Measure the package's shape from its source: modules, import cycles, upward imports, import depth, and the
longest modules and functions. Reads files only (ast); imports nothing from the package.

    python tools/architecture.py [PACKAGE_DIR]      # default: conductor_mcp next to this folder

Layers, lowest first: a module may import from its own layer and the ones below, never from above.
Imports under `if TYPE_CHECKING:` are annotations only and are not counted.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "config", "runtime"),
    ("logs", "isolation"),
    ("core",),
    ("models", "runs", "agents"),
    ("engine",),
    ("pools", "service", "context_files"),
    ("learning", "doors"),
    ("cli", "__main__"),
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


@dataclass
class Shape:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, set[str]] = field(default_factory=dict)
    functions: list[tuple[int, str]] = field(default_factory=list)  # (lines, "module:function")


def module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.Module, name: str, package: str, modules: set[str]) -> set[str]:
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            skip |= {id(child) for child in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(name.split(".")[: -node.level] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in modules and m != name and m != package}


def measure(package: Path) -> Shape:
    shape = Shape()
    for path in sorted(package.rglob("*.py")):
        shape.modules[module_name(package, path)] = path
    names = set(shape.modules)
    for name, path in shape.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        shape.imports[name] = _imported(tree, name, package.name, names)
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
    text = [
        f"modules: {len(shape.modules)}",
        f"import depth: {depth(shape.imports)} modules",
        f"import cycles: {len(found_cycles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found_cycles),
        f"upward imports: {len(found_upward)}" + "".join(f"\n  {u}" for u in found_upward),
        f"modules outside the layers: {len(unlayered)}" + "".join(f"\n  {m}" for m in unlayered),
        f"largest module: {max(lines.values())} lines; over {MAX_MODULE_LINES}: "
        + (", ".join(f"{name} ({n})" for n, name in big_modules) or "none"),
        f"longest function: {longest[1]} ({longest[0]} lines); over {MAX_FUNCTION_LINES}: "
        + (", ".join(f"{name} ({n})" for n, name in long_functions) or "none"),
    ]
    ok = not (found_cycles or found_upward or unlayered or big_modules or long_functions)
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
