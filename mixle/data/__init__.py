"""Pure iteration logic over any sequence of 1-D token arrays.

Nothing here knows about files: ``documents`` may be a list of numpy arrays or a lazy
memory-mapped :class:`mixle.corpus.ShardedDocuments`; the contracts are the same.

Contracts a user may implement: :class:`DocumentSource` (what the streams read:
``len``, ``lengths``, ``fingerprint``, ``take``, ``prefetch``, ``gather_into``; a plain
sequence of arrays is adapted), :class:`PlanStore` (where epoch plans are kept across
processes; ``mixle.corpus.PlanFiles`` keeps them in files) and :class:`MixingRule`
(how a :class:`Mixture` turns weights into each row's source; :class:`ExactSchedule`
is the default, :class:`TemperatureSchedule` a second rule). A ready
``sequence_selector`` policy: :class:`LengthBandit` (EXP3 over length buckets).
Variable-sequence-length training: :class:`VariableLengthStream` (power-of-two length
buckets, one bucket per batch, a curriculum over them).
"""

from typing import TYPE_CHECKING

from mixle._lazy import attribute_names, load_attribute

# Eager: the function shares its module's name, and a lazily loaded submodule would be
# bound over the function as ``mixle.data.stream_token_source`` by the import system.
from mixle.data.stream_token_source import TokenStream, stream_token_source

if TYPE_CHECKING:
    from mixle._gather import gather_backend, set_gather_backend
    from mixle.data._attention import attention_boundaries
    from mixle.data._batch import Batch
    from mixle.data._block_schedule import BlockPhase, BlockSchedule
    from mixle.data._curriculum_bandit import LengthBandit
    from mixle.data._dcp import DcpLoaderState
    from mixle.data._documents import DocumentSource
    from mixle.data._mesh import (
        context_parallel_batch,
        context_parallel_indices,
        context_parallel_slice,
        data_parallel_place,
    )
    from mixle.data._mixing_rule import ExactSchedule, MixingRule, RowSchedule
    from mixle.data._mixture import Mixture, MixturePhase, SourceAccount, SourceBudget
    from mixle.data._mixture_source import MixtureSource
    from mixle.data._options import PackOptions, ShardOptions
    from mixle.data._packing_options import PackingOptions
    from mixle.data._packing_report import PackingSummary, compare_packings
    from mixle.data._plan_store import PlanStore
    from mixle.data._resumable import ResumableStream
    from mixle.data._row_plan import RowPlan, register_layout
    from mixle.data._sightings import Sighting, sightings
    from mixle.data._temperature_schedule import TemperatureSchedule
    from mixle.data._vsl_stream import VariableLengthStream
    from mixle.data.streaming_corpus import (
        PackedCorpus,
        StreamingCorpus,
        global_document_order,
        pack_documents,
        shard_documents_for_rank,
    )

# Each public name and the module that defines it; loaded by ``__getattr__`` on first use,
# so a reader of one stream loads no mixture, best-fit or curriculum code.
_HOMES: dict[str, str] = {
    "gather_backend": "mixle._gather",
    "set_gather_backend": "mixle._gather",
    "attention_boundaries": "mixle.data._attention",
    "Batch": "mixle.data._batch",
    "BlockPhase": "mixle.data._block_schedule",
    "BlockSchedule": "mixle.data._block_schedule",
    "LengthBandit": "mixle.data._curriculum_bandit",
    "DcpLoaderState": "mixle.data._dcp",
    "DocumentSource": "mixle.data._documents",
    "context_parallel_batch": "mixle.data._mesh",
    "context_parallel_indices": "mixle.data._mesh",
    "context_parallel_slice": "mixle.data._mesh",
    "data_parallel_place": "mixle.data._mesh",
    "ExactSchedule": "mixle.data._mixing_rule",
    "MixingRule": "mixle.data._mixing_rule",
    "RowSchedule": "mixle.data._mixing_rule",
    "Mixture": "mixle.data._mixture",
    "MixturePhase": "mixle.data._mixture",
    "SourceAccount": "mixle.data._mixture",
    "SourceBudget": "mixle.data._mixture",
    "MixtureSource": "mixle.data._mixture_source",
    "PackOptions": "mixle.data._options",
    "ShardOptions": "mixle.data._options",
    "PackingOptions": "mixle.data._packing_options",
    "PackingSummary": "mixle.data._packing_report",
    "compare_packings": "mixle.data._packing_report",
    "PlanStore": "mixle.data._plan_store",
    "ResumableStream": "mixle.data._resumable",
    "RowPlan": "mixle.data._row_plan",
    "register_layout": "mixle.data._row_plan",
    "Sighting": "mixle.data._sightings",
    "sightings": "mixle.data._sightings",
    "TemperatureSchedule": "mixle.data._temperature_schedule",
    "VariableLengthStream": "mixle.data._vsl_stream",
    "PackedCorpus": "mixle.data.streaming_corpus",
    "StreamingCorpus": "mixle.data.streaming_corpus",
    "global_document_order": "mixle.data.streaming_corpus",
    "pack_documents": "mixle.data.streaming_corpus",
    "shard_documents_for_rank": "mixle.data.streaming_corpus",
}

__all__ = [
    "Batch",
    "BlockPhase",
    "BlockSchedule",
    "DcpLoaderState",
    "DocumentSource",
    "ExactSchedule",
    "LengthBandit",
    "MixingRule",
    "Mixture",
    "MixturePhase",
    "MixtureSource",
    "PackOptions",
    "PackedCorpus",
    "PackingOptions",
    "PackingSummary",
    "PlanStore",
    "ResumableStream",
    "RowPlan",
    "RowSchedule",
    "ShardOptions",
    "Sighting",
    "SourceAccount",
    "SourceBudget",
    "StreamingCorpus",
    "TemperatureSchedule",
    "TokenStream",
    "VariableLengthStream",
    "attention_boundaries",
    "compare_packings",
    "context_parallel_batch",
    "context_parallel_indices",
    "context_parallel_slice",
    "data_parallel_place",
    "gather_backend",
    "global_document_order",
    "pack_documents",
    "register_layout",
    "set_gather_backend",
    "shard_documents_for_rank",
    "sightings",
    "stream_token_source",
]


def __getattr__(name: str) -> object:
    """Import the module that defines ``name`` on first use and cache the attribute."""
    return load_attribute(globals(), _HOMES, name)


def __dir__() -> list[str]:
    return attribute_names(globals(), __all__)
