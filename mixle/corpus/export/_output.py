"""An export's output directory: checked before anything is written, and its marker.

An export is one directory, built in a
:func:`~mixle.corpus.storage.publish.staged_directory` (tag ``mixle-export``) next to
the output and swapped into place: every written file is fsynced, a small
``.mixle-export.json`` (:func:`write_marker`) records what the export holds, and only
then is the directory renamed to the output name. A reader (Megatron, LitData, a later
``--overwrite``) therefore sees no output, the previous one, or the complete new one;
a failed or killed export leaves at most the hidden staging directory
(``.NAME.mixle-export-<pid>-<hex>``), never a partial output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from mixle._file_checks import check_replaceable
from mixle.corpus.export._source import new_file, write_all
from mixle.errors import ArgumentError, CorpusExistsError

__all__ = [
    "MARKER_NAME",
    "STAGING_TAG",
    "check_output",
    "make_marker",
    "write_file",
    "write_marker",
]

#: The file every export carries; ``--overwrite`` replaces only directories holding it.
MARKER_NAME = ".mixle-export.json"
MARKER_FORMAT = "mixle-export"
MARKER_VERSION = 1
#: The tag of an export's staging directory (``.NAME.mixle-export-<pid>-<hex>``).
STAGING_TAG = "mixle-export"


def check_output(output: str, overwrite: bool, source_location: str) -> str:
    """Validate the export destination before anything is written; return its absolute path.

    Raises
    ------
    ArgumentError
        ``output`` is a URL (exports are local directories: links need a filesystem),
        or is or contains the corpus directory (real paths compared).
    CorpusExistsError
        ``output`` exists and ``overwrite`` is false, or it exists and is neither an
        empty directory nor a previous mixle export (so ``--overwrite`` never deletes
        data it did not write).
    """
    if "://" in output and not output.startswith("file://"):
        raise ArgumentError(
            f"`output` must be a local directory (exports link files). Got {output!r} instead; "
            "export locally, then copy the directory."
        )
    path = os.path.abspath(output[len("file://") :] if output.startswith("file://") else output)
    # Real paths, and "contains" as well as "is": replacing an export that holds the
    # corpus being exported (or a link to it) would delete that corpus.
    check_replaceable(
        path, [source_location], what="`output`", kept="the corpus", allow_inside=True
    )
    if not os.path.lexists(path):
        return path
    if not overwrite:
        raise CorpusExistsError(
            f"{path} already exists; pass overwrite=True (--overwrite) to replace it."
        )
    if not os.path.isdir(path) or os.path.islink(path):
        raise CorpusExistsError(
            f"{path} exists and is not a directory; refusing to replace it (remove it yourself)."
        )
    if os.listdir(path) and not os.path.isfile(os.path.join(path, MARKER_NAME)):
        raise CorpusExistsError(
            f"{path} is not a mixle export (no {MARKER_NAME}); --overwrite replaces only "
            "previous exports. Remove it yourself or choose another output."
        )
    return path


def make_marker(
    target: str, source: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``.mixle-export.json`` content (without ``files``, added by :func:`write_marker`)."""
    return {
        "format": MARKER_FORMAT,
        "version": MARKER_VERSION,
        "target": target,
        "source": dict(source),
        "options": dict(options),
    }


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` and fsync it."""
    with new_file(path) as fd:
        write_all(fd, data)


def write_marker(staging: str, marker: Mapping[str, Any]) -> None:
    """Write ``marker``, completed with the sorted list of the files in ``staging``, as
    :data:`MARKER_NAME` there (the last file of an export, before the swap)."""
    value = {**marker, "files": sorted(os.listdir(staging))}
    write_file(
        os.path.join(staging, MARKER_NAME),
        json.dumps(value, sort_keys=True, indent=1).encode("utf-8"),
    )
