"""``npz``: flat ``tokens`` and ``offsets`` (``n + 1`` entries) in ``NAME.npz``, or the
pair ``NAME.tokens.npy`` + ``NAME.offsets.npy`` (see :mod:`mixle.corpus.ingestion.flat`).
"""

from __future__ import annotations

from mixle.corpus.ingestion.flat import FlatSource, open_npz
from mixle.corpus.ingestion.formats.base import FormatDoc
from mixle.corpus.ingestion.formats.token_arrays import TokenArrayFormat
from mixle.corpus.ingestion.work import InputFile, WorkUnit

__all__ = ["NpzFormat"]


class NpzFormat(TokenArrayFormat):
    """NumPy token and offset arrays, one archive or a pair of ``.npy`` files."""

    name = "npz"
    extensions = (".npz", ".tokens.npy")
    doc = FormatDoc(
        files="`NAME.npz` with `tokens` + `offsets`, or `NAME.tokens.npy` + `NAME.offsets.npy`",
        document="`tokens[offsets[i]:offsets[i+1]]`",
        units="document ranges of max(`--unit-size`, `--shard-size`) bytes of ids (one full "
        "shard each)",
    )

    def pair(self, path: str, expanded: bool) -> tuple[str, str] | None:
        """``NAME.tokens.npy`` brings ``NAME.offsets.npy``; the latter alone is passed over."""
        if path.endswith(".offsets.npy"):
            return None
        if path.endswith(".tokens.npy"):
            return path, path[: -len(".tokens.npy")] + ".offsets.npy"
        return path, ""

    def open(self, item: InputFile | WorkUnit, *, check_crc: bool) -> FlatSource:
        """Map the arrays (:func:`~mixle.corpus.ingestion.flat.open_npz`)."""
        return open_npz(item.path, item.companion, check_crc=check_crc)
