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

import platform
import sys
import time
from collections import Counter

import hypothesis
from hypothesis import HealthCheck, given, settings

import car_rag
from car_rag.evidence import render_audit, render_reader
from car_rag_evals.fuzz_command import fuzz_arguments, hold, write_report
from car_rag_evals.xml_fuzz import NASTY, cases, check_reader_rendering, check_rendering


def run(examples: int, seed_value: int | None) -> tuple[Counter, str]:
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

    return stats, hold(property_holds, seed_value)


def main() -> int:
    args = fuzz_arguments(__doc__)
    started = time.perf_counter()
    stats, failure = run(args.examples, args.seed)
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
    keys = (
        "with_forbidden_control_chars",
        "with_lone_surrogates",
        "with_markup",
        "with_token_budget",
        "with_dropped_packets",
        "with_superseded_omitted",
        "with_conflict_group",
    )
    verdict = (
        "every example parsed (ElementTree and minidom) to exactly the expected packets, "
        "attributes and text equal to the sanitized originals, in both forms"
    )
    return write_report(lines, stats, keys, verdict, failure, args.out)


if __name__ == "__main__":
    sys.exit(main())
