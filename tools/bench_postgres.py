"""A throwaway PostgreSQL cluster for benchmarks, and the CPU its processes have used (from /proc), so a benchmark
can charge the database its share of a run: the postmaster, every backend and background process it started, and
those that have already exited (their CPU is added to the postmaster's children's time when it reaps them).

Debian's `postgresql` package (initdb, pg_ctl under /usr/lib/postgresql/N/bin); as root, its tools run as the
`postgres` account, since PostgreSQL refuses to run as root. The cluster keeps PostgreSQL's defaults (fsync and
synchronous commit on), as a real deployment would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _as_postgres(args: list[str]) -> list[str]:
    if os.getuid() != 0:
        return args
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in args)]


@contextmanager
def throwaway_cluster(port: int) -> Iterator[tuple[str, int]]:
    """A new cluster on 127.0.0.1:PORT for as long as the block runs: (its URL, the postmaster's pid)."""
    pg_ctls = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not pg_ctls:
        raise SystemExit("--postgres: PostgreSQL is not installed (apt-get install postgresql)")
    bindir = pg_ctls[-1].parent
    base = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    if os.getuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    data = base / "data"
    initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
    subprocess.run(_as_postgres(initdb), check=True, capture_output=True)
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c max_connections=200"
    start = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o", options, "start"]
    subprocess.run(_as_postgres(start), check=True, capture_output=True)
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", pid
    finally:
        stop = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(_as_postgres(stop), capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cluster_cpu_s(postmaster: int) -> float:
    """CPU seconds used so far by the cluster: the postmaster (its own and its reaped children's) plus every live
    child of it."""
    fields = _stat(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat(int(entry.name))
        except (OSError, IndexError):  # it exited while we looked
            continue
        if int(child[1]) == postmaster:
            total += int(child[11]) + int(child[12])
    return total / TICKS
