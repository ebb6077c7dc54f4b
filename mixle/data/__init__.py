"""Pure iteration logic over any sequence of 1-D token arrays.

Nothing here knows about files: ``documents`` may be a list of numpy arrays or a lazy
memory-mapped :class:`mixle.corpus.ShardedDocuments`; the contracts are the same.
"""

from mixle.data._batch import Batch
from mixle.data._gather import gather_backend, set_gather_backend
from mixle.data._mixture import Mixture, MixturePhase, SourceAccount, SourceBudget
from mixle.data._mixture_source import MixtureSource
from mixle.data._options import PackOptions, ShardOptions
from mixle.data._resumable import ResumableStream
from mixle.data._row_plan import RowPlan, register_layout
from mixle.data.stream_token_source import TokenStream, stream_token_source
from mixle.data.streaming_corpus import (
    PackedCorpus,
    StreamingCorpus,
    global_document_order,
    pack_documents,
    shard_documents_for_rank,
)

__all__ = [
    "Batch",
    "Mixture",
    "MixturePhase",
    "MixtureSource",
    "PackOptions",
    "PackedCorpus",
    "ResumableStream",
    "RowPlan",
    "ShardOptions",
    "SourceAccount",
    "SourceBudget",
    "StreamingCorpus",
    "TokenStream",
    "gather_backend",
    "global_document_order",
    "pack_documents",
    "register_layout",
    "set_gather_backend",
    "shard_documents_for_rank",
    "stream_token_source",
]
