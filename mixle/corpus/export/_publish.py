"""Publishing an export: check the output, build it in a staging directory, rename.

An export is one directory. It is built under a hidden temporary name next to the
output (same filesystem, so the final step is a ``rename``), every written file is
fsynced, a small ``.mixle-export.json`` records what the export holds, and only then
is the directory renamed to the output name. A reader (Megatron, LitData, a later
``--overwrite``) therefore sees no output, the previous one, or the complete new one;
a failed or killed export leaves at most the hidden staging directory
(``.NAME.mixle-export-<pid>-<hex>``), never a partial output.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

from mixle._file_checks import check_replaceable
from mixle._io import swap_directory
from mixle.corpus.export._source import fsync_directory, new_file, write_all
from mixle.errors import ArgumentError, CorpusExistsError

__all__ = ["MARKER_NAME", "check_output", "make_marker", "staging_directory", "write_file"]

#: The file every export carries; ``--overwrite`` replaces only directories holding it.
MARKER_NAME = ".mixle-export.json"
MARKER_FORMAT = "mixle-export"
MARKER_VERSION = 1


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


@contextlib.contextmanager
def staging_directory(output: str, marker: dict[str, Any]) -> Iterator[str]:
    """Yield an empty staging directory next to ``output``; publish it on success.

    On normal exit, ``marker`` (completed with the sorted list of files) is written
    as :data:`MARKER_NAME`, the staging directory is fsynced and renamed to
    ``output`` (replacing a previous export there, which :func:`check_output`
    allowed), and the parent directory is fsynced. On an exception the staging
    directory is removed and the exception propagates; ``output`` is untouched.
    """
    parent, name = os.path.split(output)
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{name}.mixle-export-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(staging)
    try:
        yield staging
        files = sorted(os.listdir(staging))
        _write_json(os.path.join(staging, MARKER_NAME), {**marker, "files": files})
        fsync_directory(staging)
        swap_directory(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def make_marker(
    target: str, source: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``.mixle-export.json`` content (without ``files``, added when publishing)."""
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


def _write_json(path: str, value: Mapping[str, Any]) -> None:
    write_file(path, json.dumps(value, sort_keys=True, indent=1).encode("utf-8"))
