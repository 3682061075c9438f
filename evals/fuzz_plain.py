"""Fuzz the plain evidence form for injection safety, with as many examples as you like.

Runs the property of ``tests/unit/test_plain_escaping.py`` (the same strategies and invariants,
:mod:`car_rag_evals.plain_fuzz`): records whose types, versions and texts are adversarial
(Unicode line and paragraph separators, bidirectional and zero-width characters, forged
``[Document N]`` headers and notes, the XML fuzz's fragments, generated text), some voided by
records the caller may not read, resolved and rendered with random options; no line but the
renderer's may start like a header, and every type and text must read back.

Run:  python evals/fuzz_plain.py --examples 10000 [--seed N] [--out evals/results/fuzz_plain.txt]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, given, seed, settings

import car_rag
from car_rag.evidence.wording import HIDDEN_REPLACER_NOTE
from car_rag_evals.plain_fuzz import FORGERIES, check_plain, plain_cases, render_case

_BREAKS = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e\r"
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def run(examples: int, seed_value: int | None) -> tuple[bool, Counter, str]:
    stats: Counter = Counter()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
    @given(plain_cases())
    def property_holds(case):
        records, options = case
        result, out = render_case(records, options)
        stats["examples"] += 1
        stats["records"] += len(records)
        stats["chars"] += len(out)
        values = "".join(r.text + r.doc_type + (r.version or "") for r in records)
        stats["with_unicode_line_breaks"] += any(c in values for c in _BREAKS)
        stats["with_bidi_controls"] += any(c in values for c in _BIDI)
        stats["with_a_forged_header"] += "[Document" in values or "[document" in values.lower()
        stats["with_quoted_forgeries"] += "[quoted: " in out
        stats["with_quoted_types"] += '] ("' in out
        stats["with_hidden_replacer_note"] += HIDDEN_REPLACER_NOTE in out
        stats["with_token_budget"] += options["token_budget"] is not None
        stats["dated"] += options["dated"]
        check_plain(result, options, out)

    test = seed(seed_value)(property_holds) if seed_value is not None else property_holds
    try:
        test()
    except BaseException as exc:  # report, then fail the command
        if isinstance(exc, KeyboardInterrupt):
            raise
        return False, stats, "".join(traceback.format_exception(exc))
    return True, stats, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=10_000, help="Hypothesis max_examples (default 10000)")
    parser.add_argument("--seed", type=int, default=None, help="fix the Hypothesis seed (default: random)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error("--examples must be >= 1")
    started = time.perf_counter()
    ok, stats, failure = run(args.examples, args.seed)
    elapsed = time.perf_counter() - started
    lines = [
        "fuzz_plain: injection safety of car_rag.evidence.plain.render_plain",
        f"car-rag {car_rag.__version__}, hypothesis {hypothesis.__version__}, Python {platform.python_version()}",
        f"seed: {args.seed if args.seed is not None else 'random'}; max_examples: {args.examples}; "
        f"{len(FORGERIES)} header forgeries and the XML fuzz's fragments mixed with generated text",
        f"examples run: {stats['examples']} ({stats['records']} records, {stats['chars']:,} characters) in {elapsed:.1f} s",
    ]
    n = max(stats["examples"], 1)
    for key in (
        "with_unicode_line_breaks",
        "with_bidi_controls",
        "with_a_forged_header",
        "with_quoted_forgeries",
        "with_quoted_types",
        "with_hidden_replacer_note",
        "with_token_budget",
        "dated",
    ):
        lines.append(f"  examples {key.replace('_', ' ')}: {stats[key]} ({100 * stats[key] / n:.0f}%)")
    lines.append(
        "result: PASS - in every example only the renderer's headers start a line (at any Unicode line break), "
        "LF is the only line break, no control or bidi character is written, every type and text reads back"
        if ok
        else "result: FAIL"
    )
    report = "\n".join(lines) + "\n" + (f"\n{failure}" if failure else "")
    print(report, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
