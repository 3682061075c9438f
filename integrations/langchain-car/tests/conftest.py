"""Pinned before anything imports torch, transformers or chromadb: the packaged MiniLM copy
loads offline, one OpenMP thread keeps timings stable, Chroma sends no telemetry.

Sockets are disabled by pytest-socket (see ``addopts`` in ../pyproject.toml) except on
loopback, where the integration tests talk to a ``chroma run`` server."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["ANONYMIZED_TELEMETRY"] = "False"

