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

import platform
import sys
import time
from collections import Counter

import hypothesis
from hypothesis import HealthCheck, given, settings

import car_rag
from car_rag.evidence.wording import HIDDEN_REPLACER_NOTE
from car_rag_evals.fuzz_command import fuzz_arguments, hold, write_report
from car_rag_evals.plain_fuzz import FORGERIES, check_plain, plain_cases, render_case

_BREAKS = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e\r"
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def run(examples: int, seed_value: int | None) -> tuple[Counter, str]:
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

    return stats, hold(property_holds, seed_value)


def main() -> int:
    args = fuzz_arguments(__doc__)
    started = time.perf_counter()
    stats, failure = run(args.examples, args.seed)
    elapsed = time.perf_counter() - started
    lines = [
        "fuzz_plain: injection safety of car_rag.evidence.plain.render_plain",
        f"car-rag {car_rag.__version__}, hypothesis {hypothesis.__version__}, Python {platform.python_version()}",
        f"seed: {args.seed if args.seed is not None else 'random'}; max_examples: {args.examples}; "
        f"{len(FORGERIES)} header forgeries and the XML fuzz's fragments mixed with generated text",
        f"examples run: {stats['examples']} ({stats['records']} records, {stats['chars']:,} characters) in {elapsed:.1f} s",
    ]
    keys = (
        "with_unicode_line_breaks",
        "with_bidi_controls",
        "with_a_forged_header",
        "with_quoted_forgeries",
        "with_quoted_types",
        "with_hidden_replacer_note",
        "with_token_budget",
        "dated",
    )
    verdict = (
        "in every example only the renderer's headers start a line (at any Unicode line break), "
        "LF is the only line break, no control or bidi character is written, every type and text reads back"
    )
    return write_report(lines, stats, keys, verdict, failure, args.out)


if __name__ == "__main__":
    sys.exit(main())
