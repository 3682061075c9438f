"""LangChain integration for car-rag: controlling-authority retrieval in LCEL chains.

>>> from langchain_car import CARRetriever, format_evidence, answer_prompt  # doctest: +SKIP
"""

from langchain_car.compressors import CARCompressor
from langchain_car.documents import (
    document_metadata,
    document_to_record,
    load_documents,
    record_to_document,
    records_to_documents,
)
from langchain_car.embeddings import CAREmbeddings
from langchain_car.evidence import (
    CARAnswerPrompt,
    answer_prompt,
    answer_prompt_template,
    documents_to_result,
    evidence_formatter,
    format_evidence,
)
from langchain_car.extract import CARAuthorityTransformer
from langchain_car.guard import authority_guard, check_documents
from langchain_car.lookup import (
    ChromaLookup,
    DocumentListLookup,
    InMemoryLookup,
    MetadataLookup,
    PGVectorLookup,
    PGVectorStoreLookup,
)
from langchain_car.retrievers import RESOLUTION_EVENT, CARRetriever
from langchain_car.service import CARServiceRetriever, served_document
from langchain_car.store_retriever import CARVectorStoreRetriever, VectorStoreDenseSearch
from langchain_car.tools import create_car_retriever_tool, format_marked

__version__ = "0.1.0"
"""The one version source: packaging reads it (pyproject ``[tool.setuptools.dynamic]``)."""

__all__ = [
    "CARAnswerPrompt",
    "CARAuthorityTransformer",
    "CAREmbeddings",
    "CARRetriever",
    "CARVectorStoreRetriever",
    "VectorStoreDenseSearch",
    "ChromaLookup",
    "DocumentListLookup",
    "InMemoryLookup",
    "MetadataLookup",
    "PGVectorLookup",
    "PGVectorStoreLookup",
    "RESOLUTION_EVENT",
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
