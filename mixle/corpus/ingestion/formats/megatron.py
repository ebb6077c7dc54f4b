"""``megatron``: a Megatron-LM indexed dataset ``PREFIX.bin`` + ``PREFIX.idx`` (layout in
:mod:`mixle.corpus.ingestion.flat`); a document is the concatenation of its sequences.
"""

from __future__ import annotations

import os

from mixle.corpus.ingestion.flat import FlatSource, open_megatron
from mixle.corpus.ingestion.formats.base import FormatDoc
from mixle.corpus.ingestion.formats.token_arrays import TokenArrayFormat
from mixle.corpus.ingestion.work import InputFile, WorkUnit

__all__ = ["MegatronFormat"]


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
