"""The public surface, and the partner-package rule: import only from langchain_core."""

from __future__ import annotations

import subprocess
import sys

from langchain_car import __all__

EXPECTED_ALL = [
    "CARAnswerPrompt",
    "CARAuthorityTransformer",
    "CAREmbeddings",
    "CARRetriever",
    "CARVectorStoreRetriever",
    "ChromaLookup",
    "DocumentListLookup",
    "InMemoryLookup",
    "MetadataLookup",
    "PGVectorLookup",
    "PGVectorStoreLookup",
    "RESOLUTION_EVENT",
    "VectorStoreDenseSearch",
    "answer_prompt",
    "answer_prompt_template",
    "authority_guard",
    "check_documents",
    "document_metadata",
    "document_to_record",
    "documents_to_result",
    "evidence_formatter",
    "format_evidence",
    "load_documents",
    "record_to_document",
    "records_to_documents",
    "__version__",
    "CARCompressor",
    "create_car_retriever_tool",
    "format_marked",
    "CARServiceRetriever",
    "served_document",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)


def test_imports_only_langchain_core_and_car_rag() -> None:
    code = (
        "import sys, langchain_car; "
        "print(sorted({m.split('.')[0] for m in sys.modules "
        "if m.startswith(('langchain', 'chromadb', 'torch', 'sentence_transformers'))}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['langchain_car', 'langchain_core']"


def test_py_typed_is_shipped() -> None:
    from importlib import resources

    assert (resources.files("langchain_car") / "py.typed").is_file()
