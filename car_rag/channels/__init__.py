"""Stage-1 channels: lexical (BM25) and dense retrieval, and rank fusion."""

from car_rag.channels.base import ChannelHit, LexicalIndex
from car_rag.channels.dense import DenseChannel, VectorChannel
from car_rag.channels.fusion import FusedHit, reciprocal_rank_fusion
from car_rag.channels.lexical import BACKENDS, load_lexical_index, make_lexical_index

__all__ = [
    "BACKENDS",
    "ChannelHit",
    "LexicalIndex",
    "make_lexical_index",
    "load_lexical_index",
    "DenseChannel",
    "VectorChannel",
    "FusedHit",
    "reciprocal_rank_fusion",
]
