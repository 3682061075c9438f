"""``car-rag demo``: dense-only, BM25-only and car-rag side by side on the packaged demo corpus."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from car_rag.cli.command import Command, count

__all__ = ["DEMO"]


def _arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--k", type=count, default=5, help="records shown per system")
    demo.add_argument("--store", type=Path, help="keep the demo store here (default: a temporary directory)")


def _run(args: argparse.Namespace) -> int:
    from car_rag.demo import run_demo

    run_demo(sys.stdout, k=args.k, store_dir=args.store)
    return 0


DEMO = Command(
    "demo",
    "dense-only vs BM25-only vs car-rag on the packaged demo corpus",
    ("car-rag demo", "car-rag demo --k 3 --store ./demo-store"),
    arguments=_arguments,
    run=_run,
)
