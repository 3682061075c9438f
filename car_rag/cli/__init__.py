"""The ``car-rag`` command line: ingest, query, serve, demo, policies; postgres (a PostgreSQL for
development and tests); bench, eval-llm, guard, report and fanin run the evaluation harness
(``car_rag_evals``), which declares them through entry points (:mod:`car_rag.cli.parser`).

One module per command, each a :class:`~car_rag.cli.command.Command`; :mod:`.options` holds the
options several take. Exit status: 0 done; 1 a runtime error (a missing file or store, a bad
policy, a missing extra) or an ingest that rejected records (or, with ``--strict``, found records a
rule cannot fire for); 2 a usage error (bad or conflicting options); 3 ``postgres status``: not
running. ``-v``/``-vv`` show what the library logs (INFO/DEBUG) on stderr.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from car_rag.cli.command import UsageError
from car_rag.cli.parser import build_parser
from car_rag.extras import MissingExtraError

__all__ = ["main", "build_parser"]


def _quiet_runtime() -> None:
    # Offline-safe and fast defaults on small CPU machines; an explicit setting wins.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


_log_handler: logging.Handler | None = None


def _configure_logging(verbose: int) -> None:
    """What car_rag (and the harness) log goes to stderr: warnings by default, ``-v`` INFO,
    ``-vv`` DEBUG. Other libraries' loggers are left alone; one handler per process (a new
    ``main`` call, e.g. in tests, replaces it and writes to the current ``sys.stderr``)."""
    global _log_handler
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("car-rag: %(levelname)s: %(name)s: %(message)s"))
    for name in ("car_rag", "car_rag_evals"):
        logger = logging.getLogger(name)
        if _log_handler is not None:
            logger.removeHandler(_log_handler)
        logger.addHandler(handler)
        logger.setLevel(level)
    _log_handler = handler


def _stdout_gone() -> None:
    """stdout's reader went away (``car-rag policies | head -1``): stop quietly. Point stdout at
    devnull so the interpreter's final flush raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (stdout replaced, e.g. in tests)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``car-rag``; returns the exit status (argparse's own usage errors raise SystemExit(2))."""
    _quiet_runtime()
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except UsageError as exc:
        args.parser.print_usage(sys.stderr)
        print(f"car-rag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _stdout_gone()
        return 1
    except KeyboardInterrupt:
        print(f"car-rag {args.command}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError, MissingExtraError) as exc:  # OSError: unreadable files as well as missing ones
        print(f"car-rag {args.command}: error: {exc}", file=sys.stderr)
        return 1
