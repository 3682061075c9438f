"""``car-rag extract``: raw documents (``doc_id``, ``text``) in, records out, with every extracted
field's source and confidence and a report of what could not be typed, scoped or resolved."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from car_rag.cli.command import Command, count

if TYPE_CHECKING:
    from car_rag.extract import ExtractReport

__all__ = ["EXTRACT", "extract_arguments", "print_report"]


def extract_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``extract`` and ``ingest --extract`` share."""
    from car_rag.extract import MAX_CHARS

    parser.add_argument(
        "--max-chars", type=count, default=MAX_CHARS, help="the longest text read; a longer document is reported, not cut"
    )
    parser.add_argument(
        "--extract-report", type=Path, help="write the whole extraction report (edges with their evidence, skips) as JSON"
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("raw", type=Path, help="JSONL of raw documents: doc_id and text; title and any other field optional")
    parser.add_argument("--policy", required=True, help="built-in policy name or .toml/.json file (its [extract] section)")
    parser.add_argument("--out", type=Path, required=True, help="JSONL records to write (replaced whole at the end)")
    parser.add_argument(
        "--cache-dir", type=Path, help="where LLM answers are cached (default: $XDG_CACHE_HOME/car-rag/scope-llm)"
    )
    extract_arguments(parser)


def print_report(report: ExtractReport, path: Path | None) -> None:
    """Every problem on stderr, one line each, naming its document; the whole report to ``path``."""
    for error in report.errors:
        print(f"rejected: {error}", file=sys.stderr)
    for line in report.problems():
        print(f"warning: {line}", file=sys.stderr)
    if path is not None:
        path.write_text(json.dumps(report.as_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _run(args: argparse.Namespace) -> int:
    from car_rag.extract import AuthorityExtractor

    extractor = AuthorityExtractor(args.policy, cache_dir=args.cache_dir, max_chars=args.max_chars)
    report = extractor.extract(args.raw)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=args.out.parent, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
        for record in report.records:
            tmp.write(record.model_dump_json(exclude_none=True) + "\n")
    os.replace(tmp.name, args.out)  # whole or not at all: an earlier file is never left half written
    print_report(report, args.extract_report)
    print(f"{args.raw}: {report.summary()}; wrote {args.out}")
    return 1 if report.errors else 0


EXTRACT = Command(
    "extract",
    "make records out of raw documents: doc types, scope and supersession edges with confidence",
    (
        "car-rag extract raw.jsonl --policy my-policy.toml --out records.jsonl",
        "car-rag extract raw.jsonl --policy my-policy.toml --out records.jsonl --extract-report report.json",
    ),
    "Make records out of raw documents (one JSON object a line: doc_id and text; title, published_at and "
    "any other field optional, kept as metadata). The policy's [extract] section says how documents cite "
    "each other (identifier patterns, aliases, titles) and how they are typed; supersession stated in "
    "headers ('Replaces:', 'Superseded-By:', YAML front matter) or in prose ('This policy replaces ...', "
    "'is superseded by ...') becomes a supersedes entry with its confidence, every extracted field's source "
    "and confidence go in metadata.extracted. What could not be typed, scoped or resolved is named on "
    "stderr; a document that cannot be read is rejected (exit 1) and the others are written.",
    _arguments,
    _run,
)
