"""The header eval scripts open their results with (car_rag_evals.results_header), in a real git checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from car_rag_evals.results_header import header_line, load_text, results_header


def git(folder: Path, *args: str) -> str:
    command = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def test_a_script_in_a_checkout_is_named_from_its_root_with_the_commit_it_ran_from(tmp_path):
    git(tmp_path, "init", "-q")
    script = tmp_path / "evals" / "scale" / "bench.py"
    script.parent.mkdir(parents=True)
    script.write_text("print('bench')\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "bench")
    header = results_header(script, ["--size", "10"])
    assert header.command == "python evals/scale/bench.py --size 10"
    assert header.commit == git(tmp_path, "rev-parse", "--short", "HEAD") and not header.uncommitted
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", header.when)
    assert len(header.load) == 3 and header.load_text == load_text(header.load)
    assert header.machine == f"{header.cpus} CPUs, {header.platform}, OMP_NUM_THREADS={header.omp_num_threads}"
    assert list(header.machine_fields()) == ["cpus", "platform", "python", "omp_num_threads"]
    script.write_text("print('changed')\n")
    assert results_header(script, []).uncommitted
    assert results_header(script, []).command == "python evals/scale/bench.py"


def test_outside_a_checkout_the_commit_is_empty_and_the_script_named_alone(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("")
    header = results_header(script, ["--quick"])
    assert (header.command, header.commit) == ("python bench.py --quick", "")


def test_the_line_renders_the_json_fields_the_machine_only_where_it_is_text():
    fields = {"command": "python evals/x.py", "when": "2026-12-07 22:40 UTC", "commit": "abc1234", "machine": "2 CPUs"}
    assert header_line(fields) == "`python evals/x.py`; 2026-12-07 22:40 UTC; commit abc1234; 2 CPUs"
    assert header_line({**fields, "machine": {"cpus": 2}}) == "`python evals/x.py`; 2026-12-07 22:40 UTC; commit abc1234"
    assert load_text((0.5, 1.25, 2)) == "0.50, 1.25, 2.00"
