"""What `make demo` and `make test` would run on a fresh clone (``make -n``: printed, not run):
the demo installs no browser; the tests install chromium, as root with apt-get, and say so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(target: str, venv: Path) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_no_browser(tmp_path):
    commands = dry_run("demo", tmp_path / "venv")  # a venv not yet made: every install step is printed
    assert "pip install" in commands and "car-rag demo" in commands
    assert "apt-get" not in commands and "chromium" not in commands


def test_make_test_installs_chromium_and_says_so_first(tmp_path):
    commands = dry_run("test", tmp_path / "venv")
    said, installed = commands.find("installing chromium (apt-get, as root)"), commands.find("apt-get install -y -qq chromium")
    assert 0 <= said < installed, commands
