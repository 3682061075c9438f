"""What a results file opens with: the command that wrote it, the commit it ran from, the UTC time, the
machine and its load averages, so that each committed figure can be traced to its run and its load judged.
One helper for the eval scripts, so their results' headers say the same things in the same words."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ResultsHeader:
    """One run's header fields, taken when :func:`results_header` was called (the load averages included)."""

    command: str
    commit: str  # ``git rev-parse --short HEAD`` of the script's checkout; "" outside one
    uncommitted: bool  # the checkout had changes git did not hold yet
    when: str  # "YYYY-MM-DD HH:MM UTC"
    cpus: int | None
    platform: str
    python: str
    omp_num_threads: str | None
    load: tuple[float, float, float]  # 1, 5 and 15 minutes

    @property
    def machine(self) -> str:
        """The machine as the results' headers say it: "8 CPUs, Linux-…, OMP_NUM_THREADS=1"."""
        return f"{self.cpus} CPUs, {self.platform}, OMP_NUM_THREADS={self.omp_num_threads}"

    @property
    def load_text(self) -> str:
        """The load averages, "0.52, 0.40, 0.31"."""
        return load_text(self.load)

    def machine_fields(self) -> dict[str, Any]:
        """The machine as the results' JSON keeps it where it is a table of its own: cpus, platform, python,
        omp_num_threads."""
        return {"cpus": self.cpus, "platform": self.platform, "python": self.python, "omp_num_threads": self.omp_num_threads}

    def fields(self) -> dict[str, Any]:
        """The fields the results' JSON keeps and :func:`header_line` renders: command, commit, when, machine."""
        return {"command": self.command, "commit": self.commit, "when": self.when, "machine": self.machine}


def results_header(script: str | Path, argv: Sequence[str] | None = None) -> ResultsHeader:
    """The header of a run of ``script`` (a script's ``__file__``) with ``argv`` (default: this process's
    arguments), its command written from the checkout's root as the results' readers rerun it."""
    path = Path(script).resolve()
    git = ["git", "--no-optional-locks", "-C", str(path.parent)]  # it only reads: no index refresh beside a commit
    found = subprocess.run([*git, "rev-parse", "--show-toplevel", "--short", "HEAD"], capture_output=True, text=True)
    root, commit = found.stdout.splitlines() if found.returncode == 0 else (str(path.parent), "")
    changes = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    return ResultsHeader(
        command=" ".join(["python", path.relative_to(root).as_posix(), *(sys.argv[1:] if argv is None else argv)]),
        commit=commit,
        uncommitted=bool(changes),
        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cpus=os.cpu_count(),
        platform=platform.platform(),
        python=platform.python_version(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        load=(load[0], load[1], load[2]),
    )


def load_text(load: Sequence[float]) -> str:
    """Load averages as the results' headers and tables print them, two decimals each."""
    return ", ".join(f"{x:.2f}" for x in load)


def header_line(fields: Mapping[str, Any]) -> str:
    """The line under a results file's title, "`command`; when; commit abc1234; machine", from its JSON (the
    machine where the JSON holds it as text), so that a results file rendered again opens the same way."""
    parts = [f"`{fields['command']}`", fields["when"], f"commit {fields['commit']}"]
    if isinstance(fields.get("machine"), str):
        parts.append(fields["machine"])
    return "; ".join(parts)
