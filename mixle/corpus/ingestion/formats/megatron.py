"""``megatron``: a Megatron-LM indexed dataset ``PREFIX.bin`` + ``PREFIX.idx`` (layout in
:mod:`mixle.corpus.ingestion.flat`); a document is the concatenation of its sequences.

A ``PREFIX.origins`` beside the pair (what ``mixle export`` writes for a corpus with
origins: an origins sidecar of the prefix's documents) is picked up: the documents
keep the origins and ids recorded there, instead of naming ``PREFIX.bin``. One that
is not a sidecar of the pair's document count stops the ingest, naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from mixle.corpus.format.origins import OriginsTable
from mixle.corpus.ingestion.flat import FlatSource, open_megatron
from mixle.corpus.ingestion.formats.base import FormatDoc
from mixle.corpus.ingestion.formats.reading import InputBatch, ReadOptions
from mixle.corpus.ingestion.formats.token_arrays import TokenArrayFormat
from mixle.corpus.ingestion.work import InputFile, WorkUnit, open_binary
from mixle.errors import CorpusFormatError, IngestError

__all__ = ["ORIGINS_SUFFIX", "MegatronFormat"]

#: ``PREFIX`` + this: the origins of the pair's documents (an export's sidecar).
ORIGINS_SUFFIX = ".origins"


def _stem(path: str) -> str:
    """``path`` without a trailing ``.idx``, then without a trailing ``.bin``."""
    stem = path[: -len(".idx")] if path.endswith(".idx") else path
    return stem[: -len(".bin")] if stem.endswith(".bin") else stem


class MegatronFormat(TokenArrayFormat):
    """Megatron-LM ``.bin``/``.idx`` pairs, named by either file or the prefix."""

    name = "megatron"
    extensions = (".bin", ".idx")
    doc = FormatDoc(
        files="`PREFIX.bin` + `PREFIX.idx` (name either file or the prefix)",
        document="the concatenation of its sequences",
        units="as `npz`",
    )

    def named_by(self, spec: str) -> str | None:
        """``PREFIX`` (or a missing ``PREFIX.bin``) stands for ``PREFIX.bin`` when both
        ``PREFIX.bin`` and ``PREFIX.idx`` exist."""
        stem = spec[: -len(".bin")] if spec.endswith(".bin") else spec
        if os.path.exists(stem + ".bin") and os.path.exists(stem + ".idx"):
            return stem + ".bin"
        return None

    def pair(self, path: str, expanded: bool) -> tuple[str, str] | None:
        """Either file of a pair (or the prefix) is the input ``PREFIX.bin`` + ``PREFIX.idx``."""
        stem = _stem(path)
        return stem + ".bin", stem + ".idx"

    def open(self, item: InputFile | WorkUnit, *, check_crc: bool) -> FlatSource:
        """Map the index and the tokens (:func:`~mixle.corpus.ingestion.flat.open_megatron`)."""
        return open_megatron(item.path, item.companion)

    def carried_origins(self, item: InputFile | WorkUnit) -> OriginsTable | None:
        """The sidecar ``PREFIX.origins`` beside the pair, parsed; ``None`` when absent."""
        path = _stem(item.path) + ORIGINS_SUFFIX
        if not os.path.isfile(path):
            return None
        try:
            with open_binary(path) as handle:
                return OriginsTable.of_file(handle.read(), path)
        except (OSError, CorpusFormatError) as exc:
            raise IngestError(f"{path}: not an origins sidecar of {item.path} ({exc}).") from exc

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """As :class:`TokenArrayFormat` reads, once ``PREFIX.origins`` (if any) is checked
        to be a sidecar of the pair's documents.

        Raises
        ------
        IngestError
            ``PREFIX.origins`` is not a sidecar of as many documents as ``PREFIX.idx``.
        """
        carried = self.carried_origins(unit)
        if carried is not None:
            source = self.open(unit, check_crc=False)
            count = source.num_documents
            source.close()
            if carried.documents != count:
                raise IngestError(
                    f"{_stem(unit.path)}{ORIGINS_SUFFIX}: origins of {carried.documents} "
                    f"documents, but {unit.companion} indexes {count}; remove or replace it."
                )
        yield from super().read(unit, options)
