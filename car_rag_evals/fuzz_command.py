"""What the fuzz commands (``evals/fuzz_xml.py``, ``evals/fuzz_plain.py``) share: their arguments,
running a Hypothesis property so that a failure is reported rather than raised, and the report's
counts, verdict and file."""

from __future__ import annotations

import argparse
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import seed

__all__ = ["fuzz_arguments", "hold", "write_report"]


def fuzz_arguments(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000, help="Hypothesis max_examples (default 10000)")
    parser.add_argument("--seed", type=int, default=None, help="fix the Hypothesis seed (default: random)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error("--examples must be >= 1")
    return args


def hold(property_holds: Callable[[], None], seed_value: int | None) -> str:
    """Run the property (seeded when asked): the failure's traceback, or "" when it held. Anything
    but an interrupt is a failure to report, so the command can print its counts before failing."""
    test = seed(seed_value)(property_holds) if seed_value is not None else property_holds
    try:
        test()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return "".join(traceback.format_exception(exc))
    return ""


def write_report(lines: list[str], stats: Counter, keys: Sequence[str], verdict: str, failure: str, out: Path | None) -> int:
    """The header ``lines``, each counted key as a share of the examples, ``result: PASS - verdict``
    (or FAIL and the traceback); printed, and written to ``out`` if given. The command's exit status."""
    n = max(stats["examples"], 1)
    lines = [*lines, *(f"  examples {key.replace('_', ' ')}: {stats[key]} ({100 * stats[key] / n:.0f}%)" for key in keys)]
    lines.append(f"result: PASS - {verdict}" if not failure else "result: FAIL")
    report = "\n".join(lines) + "\n" + (f"\n{failure}" if failure else "")
    print(report, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report, encoding="utf-8")
    return 1 if failure else 0
