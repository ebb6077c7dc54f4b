"""Optional dependencies: the one table of install hints, and their lazy import.

Optional backends (s3fs, gcsfs, zstandard, pyarrow, tokenizers, matplotlib, lightning,
ai2-olmo-core ...) are
imported only when a feature needs them; when one is missing, the error says which
``mixle[...]`` extra installs it.
"""

from __future__ import annotations

import importlib
from typing import Any

from mixle.errors import CorpusError, IngestError

__all__ = ["EXTRAS", "PROTOCOL_EXTRAS", "import_optional", "install_hint"]

#: Feature -> the pyproject optional-dependencies extra that provides it.
EXTRAS = {
    "s3": "s3",
    "gcs": "gcs",
    "http": "http",
    "azure": "azure",
    "zstandard": "zstd",
    "parquet": "parquet",
    "tokenizers": "tokenizers",
    "plot": "plot",
    "datasets": "hf",
    "accelerate": "hf",
    "transformers": "hf",
    "dask": "dask",
    "lightning": "lightning",
    "olmo": "olmo",
}

#: fsspec URL scheme -> the extra that provides its filesystem.
PROTOCOL_EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "http": "http",
    "https": "http",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
}


def install_hint(feature: str) -> str:
    """The shell command that installs ``feature`` (a key of :data:`EXTRAS`)."""
    return f"pip install 'mixle[{EXTRAS[feature]}]'"


def import_optional(module: str, feature: str, *, error: type[CorpusError] = IngestError) -> Any:
    """Import an optional dependency or raise ``error`` (default :class:`IngestError`)
    with the install hint of ``feature``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise error(
            f"this needs the optional package `{module.split('.')[0]}`; "
            f"install it with: {install_hint(feature)}"
        ) from exc
