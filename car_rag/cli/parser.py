"""The ``car-rag`` parser, built from the commands: the core's own (one module each) and the
evaluation harness's, found through the entry points of the group ``car_rag.commands``. The core
never imports the harness: without it, each harness command still parses and says which extra
installs it."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points

from car_rag import __version__
from car_rag.cli.command import Command, _Formatter
from car_rag.cli.demo import DEMO
from car_rag.cli.extract import EXTRACT
from car_rag.cli.ingest import INGEST
from car_rag.cli.mcp import MCP
from car_rag.cli.policies import POLICIES
from car_rag.cli.postgres import POSTGRES
from car_rag.cli.query import QUERY
from car_rag.cli.serve import SERVE
from car_rag.extras import MissingExtraError

__all__ = ["build_parser", "ENTRY_POINTS", "HARNESS_COMMANDS"]

DESCRIPTION = """\
car-rag: Controlling Authority Retrieval. Retrieves the records a question is about, then
the records that supersede them under a policy's rules, and ranks the active (controlling)
ones first with the superseded ones kept as marked provenance.

store commands:   ingest, extract, query, serve, mcp, policies, demo
for development:  postgres (a PostgreSQL with pgvector, started from car-rag[postgres])
harness commands: bench, eval-llm, guard, report, fanin (need the evaluation harness: car-rag[bench] / car-rag[llm])"""

EPILOG = """\
examples:
  car-rag ingest corpus.jsonl --store ./store --policy security-advisory
  car-rag query --store ./store "Is lodash still vulnerable to CVE-2019-10744?"
  car-rag query --store ./store --queries questions.jsonl --out answers.jsonl
  car-rag -v query --store ./store "..." --format plain

exit status: 0 done, 1 runtime error or records rejected by ingest, 2 usage error
(3: car-rag postgres status, not running).
'car-rag COMMAND --help' describes each command."""

ENTRY_POINTS = "car_rag.commands"
"""The entry-point group where the harness declares its commands (pyproject.toml): each entry names
a :class:`Command`, by the command's name."""
HARNESS_COMMANDS = {"bench": "bench", "eval-llm": "llm", "guard": "bench", "report": "bench", "fanin": "bench"}
"""The evaluation harness's commands (entry points of ``car_rag_evals``), in the order help lists
them, and the extra that installs what each runs."""


def _not_installed(name: str, extra: str) -> Command:
    """A harness command whose entry point is missing or cannot load: it runs whatever it is given
    (its options are the harness's) and says what to install."""

    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.prefix_chars = "\0"  # no options: every argument, -h included, is taken as it is
        parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)

    def run(_: argparse.Namespace) -> int:
        raise MissingExtraError(
            f"this command runs the evaluation harness (the car_rag_evals package), which is not installed: "
            f"pip install 'car-rag[{extra}]'"
        )

    return Command(name, f"needs the evaluation harness: pip install 'car-rag[{extra}]'", (), arguments=arguments, run=run)


def _harness_commands() -> list[Command]:
    """The harness's commands, from their entry points; one that is not installed says so when it runs."""
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)}
    commands = []
    for name, extra in HARNESS_COMMANDS.items():
        command: Command | None = None
        if name in found:
            try:
                command = found[name].load()
            except ModuleNotFoundError as exc:  # registered, but its module is gone
                if (exc.name or "").split(".")[0] != "car_rag_evals":
                    raise
        commands.append(command or _not_installed(name, extra))
    return commands


def build_parser() -> argparse.ArgumentParser:
    """The ``car-rag`` argument parser (every subcommand carries its own parser as ``args.parser``)."""
    verbosity = argparse.ArgumentParser(add_help=False)
    verbosity.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log what the library does on stderr: -v INFO, -vv DEBUG (default: warnings only)",
    )
    parser = argparse.ArgumentParser(prog="car-rag", description=DESCRIPTION, epilog=EPILOG, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what the library does on stderr: -v INFO, -vv DEBUG (default: warnings only)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (INGEST, EXTRACT, QUERY, SERVE, MCP, DEMO, *_harness_commands(), POSTGRES, POLICIES):
        command.add_to(sub, [verbosity])
    return parser
