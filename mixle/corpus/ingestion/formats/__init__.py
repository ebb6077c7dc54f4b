"""Input formats: one module per format, one registry that all of ingestion reads.

Each format is an :class:`InputFormat` (:mod:`.base`) in a module of its own —
:mod:`.jsonl`, :mod:`.parquet`, :mod:`.npy`, :mod:`.npz`, :mod:`.megatron`,
:mod:`.text` — registered with :func:`register_format`; importing this package registers the built-in ones,
in that order. Adding a format
is one module (a subclass of :class:`InputFormat`) plus one :func:`register_format`
call; detection, ``--input-format``, planning, reading, error messages and the docs
table then know it.
"""

from __future__ import annotations

from mixle.corpus.ingestion.formats.base import FormatDoc, InputFormat, UnitSizes
from mixle.corpus.ingestion.formats.jsonl import JsonlFormat
from mixle.corpus.ingestion.formats.megatron import MegatronFormat
from mixle.corpus.ingestion.formats.npy import NpyFormat
from mixle.corpus.ingestion.formats.npz import NpzFormat
from mixle.corpus.ingestion.formats.parquet import ParquetFormat
from mixle.corpus.ingestion.formats.reading import (
    BATCH_TOKENS,
    BadRecord,
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
    iter_lines,
    make_tokenizer,
)
from mixle.corpus.ingestion.formats.registry import (
    ENTRY_POINT_GROUP,
    detect_format,
    format_names,
    formats_table,
    get_format,
    input_formats,
    register_format,
)
from mixle.corpus.ingestion.formats.text import TextFormat
from mixle.corpus.ingestion.input_guard import ReadCursor, guard

# The built-in formats, in the order `format_names()` (and `--input-format`) lists them.
_BUILTINS = (
    JsonlFormat(),
    ParquetFormat(),
    NpyFormat(),
    NpzFormat(),
    MegatronFormat(),
    TextFormat(),
)
for _builtin in _BUILTINS:
    register_format(_builtin)
#: The names of the built-in formats (:func:`format_names` adds registered ones).
BUILTIN_FORMATS = tuple(fmt.name for fmt in _BUILTINS)

__all__ = [
    "BATCH_TOKENS",
    "BUILTIN_FORMATS",
    "ENTRY_POINT_GROUP",
    "BadRecord",
    "Collector",
    "FormatDoc",
    "InputBatch",
    "InputFormat",
    "ReadCursor",
    "ReadOptions",
    "RecordOrigins",
    "UnitSizes",
    "detect_format",
    "format_names",
    "formats_table",
    "get_format",
    "guard",
    "input_formats",
    "iter_lines",
    "make_tokenizer",
    "register_format",
]
