"""The distribution installs and imports on its own, beside LlamaIndex's other namespace packages."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distribution


def test_declares_its_dependencies():
    dist = distribution("llama-index-retrievers-car")
    requires = " ".join(dist.requires or [])
    assert "car-rag" in requires and "llama-index-core" in requires


def test_imports_in_a_fresh_interpreter():
    code = (
        "import llama_index.retrievers.car as r, llama_index.postprocessor.car as p;"
        "import llama_index.core, llama_index.retrievers.bm25, llama_index.vector_stores.chroma;"
        "assert 'CARRetriever' in r.__all__ and 'ActiveStatusFilter' in p.__all__;"
        "import importlib.resources as ir; assert ir.files('llama_index.retrievers.car').joinpath('py.typed').is_file()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
