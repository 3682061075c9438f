"""What the integration tier's PostgreSQL costs: a server per test module (initdb, start, one database,
stop), as the modules had, against one server for the session with a database per module (as
tests/conftest.py's ``postgres`` fixture gives them). The two alternate, round by round, so the machine's
load weighs on both alike. CPU seconds: this process's, its children's (initdb, pg_ctl), and the
server's own (the postmaster and the backends it reaped, read from /proc before it stops).

    python evals/postgres_per_module.py --modules 10 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from car_rag.postgres.fixture import ThrowawayPostgres, throwaway_postgres


def server_cpu(pg: ThrowawayPostgres) -> float:
    """CPU seconds of the running server: the postmaster's own and its reaped children's."""
    pid = (pg.folder / "data" / "postmaster.pid").read_text(encoding="utf-8").split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return sum(int(t) for t in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime, stime, cutime, cstime


def server_per_module(modules: int) -> float:
    server = 0.0
    for _ in range(modules):
        with throwaway_postgres() as pg:
            pg.new_database()
            server += server_cpu(pg)
    return server


def one_server(modules: int) -> float:
    with throwaway_postgres() as pg:
        for _ in range(modules):
            pg.new_database()
        return server_cpu(pg)


def measure(way: Callable[[int], float], modules: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process, its children, the server) of one way."""
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    start = time.perf_counter()
    server = way(modules)
    wall = time.perf_counter() - start
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    local = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before, strict=True))
    return wall, local + server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", type=int, default=10, help="test modules on PostgreSQL (10 in tests/integration)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ways = {"a server per module": server_per_module, "one server, a database per module": one_server}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            runs[name].append(measure(way, args.modules))
    print(f"{args.modules} modules, {args.rounds} rounds (medians); load average {os.getloadavg()[0]:.2f} at the end")
    for name, got in runs.items():
        wall, cpu = (statistics.median(x) for x in zip(*got, strict=True))
        print(f"  {name:36} {wall:7.1f} s wall  {cpu:6.1f} s CPU")


if __name__ == "__main__":
    main()
