"""Fuzz both evidence renderings for injection safety, with as many examples as you like.

Runs the property of ``tests/integration/test_xml_injection.py`` (the same strategies and invariants,
:mod:`car_rag_evals.xml_fuzz`):
packets whose every string is adversarial (generated unicode with control characters and
lone surrogates, decoded invalid UTF-8, closing tags, CDATA terminators, quotes, entities,
"ignore previous instructions" …) are rendered with random renderer options and parsed
back with ElementTree and minidom; exactly the expected packets must be there, with every
attribute and text equal to the sanitized original. The same cases then go through the
reader-first form (``render_reader``) and ``check_reader_rendering``: both parsers read it,
only its own elements appear, and every packet is an input packet, text intact.

Run:  python evals/fuzz_xml.py --examples 10000 [--seed N] [--out evals/results/fuzz_xml.txt]
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
from car_rag.evidence import render_audit, render_reader
from car_rag_evals.xml_fuzz import NASTY, cases, check_reader_rendering, check_rendering


def run(examples: int, seed_value: int | None) -> tuple[bool, Counter, str]:
    stats: Counter = Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(cases())
    def property_holds(case):
        packets, options = case
        out = render_audit(packets, **options)
        stats["examples"] += 1
        stats["packets"] += len(packets)
        stats["xml_chars"] += len(out)
        text = "".join(p.text + p.doc_id + p.evidence_packet_id + p.doc_type for p in packets)
        stats["with_forbidden_control_chars"] += any(ord(c) < 0x20 and c not in "\t\n\r" for c in text)
        stats["with_lone_surrogates"] += any(0xD800 <= ord(c) <= 0xDFFF for c in text)
        stats["with_markup"] += any(s in text for s in ("</", "]]>", '"', "&"))
        stats["with_token_budget"] += options["token_budget"] is not None
        stats["with_dropped_packets"] += "<dropped " in out
        stats["with_superseded_omitted"] += "<omitted " in out
        stats["with_conflict_group"] += "<conflict-group" in out
        stats["compact_form"] += bool(options.get("compact"))
        check_rendering(packets, options, out)
        reader_options = {k: v for k, v in options.items() if k in ("superseded", "query_id", "indent")}
        reader_options["token_budget"] = options["token_budget"] or None
        reader = render_reader(packets, **reader_options)
        stats["reader_chars"] += len(reader)
        stats["reader_with_digest"] += "<digest>" in reader
        check_reader_rendering(packets, reader_options, reader)

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
        "fuzz_xml: injection safety of car_rag.evidence.audit.render_audit and car_rag.evidence.reader.render_reader",
        f"car-rag {car_rag.__version__}, hypothesis {hypothesis.__version__}, Python {platform.python_version()}",
        f"seed: {args.seed if args.seed is not None else 'random'}; max_examples: {args.examples}; "
        f"{len(NASTY)} hand-written nasty fragments mixed with generated text",
        f"examples run: {stats['examples']} ({stats['packets']} packets, {stats['xml_chars']:,} XML characters) "
        f"in {elapsed:.1f} s; the same examples in the reader-first form: {stats['reader_chars']:,} characters, "
        f"{stats['reader_with_digest']} with a digest",
    ]
    n = max(stats["examples"], 1)
    for key in (
        "with_forbidden_control_chars",
        "with_lone_surrogates",
        "with_markup",
        "with_token_budget",
        "with_dropped_packets",
        "with_superseded_omitted",
        "with_conflict_group",
    ):
        lines.append(f"  examples {key.replace('_', ' ')}: {stats[key]} ({100 * stats[key] / n:.0f}%)")
    lines.append(
        "result: PASS - every example parsed (ElementTree and minidom) to exactly the expected packets, "
        "attributes and text equal to the sanitized originals, in both forms"
        if ok
        else "result: FAIL"
    )
    report = "\n".join(lines) + "\n"
    if failure:
        report += "\n" + failure
    print(report, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
