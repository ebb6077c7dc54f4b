"""Publish completed ingest units as one corpus: rename shards, write the manifest.

This is the single step that makes an ingest visible, and it is idempotent so a
``--resume`` after a crash at any instruction finishes it:

1. The plan (final shard names and entries, dtype, metadata, and which unit file
   becomes which shard) is written once to ``<work>/publish.json``; from then on the
   plan, not the unit directories, is the source of truth.
2. An old manifest (``--overwrite``) is removed, so readers see no corpus while old
   shard names are being reused.
3. Each unit shard is *renamed* to its final name (``shard-NNNNN``): no token byte is
   copied. A source that no longer exists was renamed by an earlier attempt.
4. Shard files of an old corpus that the new one does not use are deleted.
5. :func:`mixle.corpus.commit_manifest` writes ``manifest.json`` last, atomically.
6. The work directory is renamed away and removed (its unit directories by several
   threads at once: see :func:`remove_tree`).

A remote publisher (issue #7) can take the same plan and target a staging prefix.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mixle._io import fsync_directory, rename_atomically
from mixle.corpus.format.manifest import ShardEntry, commit_manifest, compute_fingerprint
from mixle.corpus.format.spec import MANIFEST_NAME, shard_file_names
from mixle.corpus.ingestion.workers import DONE_NAME, REJECTS_NAME, write_json_atomic

__all__ = [
    "PUBLISH_NAME",
    "build_publish_plan",
    "discard_work_dir",
    "publish",
    "read_publish_plan",
    "remove_tree",
    "write_publish_plan",
]

PUBLISH_NAME = "publish.json"
#: Threads that remove the directories of a work directory at once (see remove_tree).
_REMOVERS = 16


def build_publish_plan(
    shards: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    dtype: str,
    vocab_size: int | None,
    metadata: Mapping[str, Any],
    summary: Mapping[str, Any],
) -> dict[str, Any]:
    """Return the publish plan for ``shards`` (``(unit dir name, entry)`` pairs in corpus
    order); shard ``g`` of the corpus is named ``shard-{g:05d}``. No I/O.

    The fingerprint comes from the entries' recorded digests. The plan is returned as a
    resumed run would read it back (sorted keys), so the manifest bytes are the same
    whether or not a publish was interrupted, and wherever it is published.
    """
    entries = []
    moves = []
    for index, (unit_name, entry) in enumerate(shards):
        tokens, offsets = shard_file_names(index)
        moves.append([unit_name, entry["tokens"], tokens])
        moves.append([unit_name, entry["offsets"], offsets])
        entries.append(dict(entry, tokens=tokens, offsets=offsets))
    plan = {
        "entries": entries,
        "moves": moves,
        "dtype": dtype,
        "vocab_size": vocab_size,
        "metadata": dict(metadata),
        "summary": dict(summary),
        "fingerprint": compute_fingerprint(
            dtype, [ShardEntry.from_dict(entry, dtype, "publish plan") for entry in entries]
        ),
    }
    result: dict[str, Any] = json.loads(json.dumps(plan, sort_keys=True))
    return result


def write_publish_plan(work_dir: str, plan: Mapping[str, Any]) -> None:
    """Save a plan of :func:`build_publish_plan` in ``work_dir`` (from then on it, not
    the unit directories, is the source of truth for a resumed publish)."""
    write_json_atomic(os.path.join(work_dir, PUBLISH_NAME), plan)


def read_publish_plan(work_dir: str) -> dict[str, Any] | None:
    """Return the publish plan an interrupted run left in ``work_dir``, or ``None``."""
    try:
        with open(os.path.join(work_dir, PUBLISH_NAME), encoding="utf-8") as handle:
            plan: dict[str, Any] = json.load(handle)
    except FileNotFoundError:
        return None
    return plan


def _already_published(output: str, plan: Mapping[str, Any]) -> bool:
    try:
        with open(os.path.join(output, MANIFEST_NAME), encoding="utf-8") as handle:
            return bool(json.load(handle).get("fingerprint") == plan["fingerprint"])
    except (OSError, ValueError, AttributeError):
        return False


def discard_work_dir(work_dir: str) -> None:
    """Remove ``work_dir``: renamed away first (atomic), then deleted, so a kill while
    deleting never leaves a half-removed work directory that looks resumable."""
    trash = f"{work_dir}-done"
    remove_tree(trash)
    with contextlib.suppress(FileNotFoundError):
        rename_atomically(work_dir, trash)  # renamed away to be deleted: no fsync
    remove_tree(trash)


def remove_tree(path: str) -> None:
    """Delete the directory ``path`` and everything under it, if it exists.

    Its subdirectories (one per work unit) are removed by several threads at once.
    Deleting a file that has reached the disk waits on the device (blocks are freed,
    and on a file system mounted with ``discard`` trimmed; on NFS or Lustre every
    unlink is a server round trip): one after the other, the 3,000 files and
    directories of a 1,000-unit ingest took 10.5 s on the benchmark machine once
    fsynced, 16 at a time 0.46 s (docs/benchmarks.md, "Commit of ingest units").
    """
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    directories = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    if len(directories) > 1:
        with ThreadPoolExecutor(min(_REMOVERS, len(directories))) as pool:
            for _ in pool.map(_remove_directory, directories):
                pass
    shutil.rmtree(path, ignore_errors=True)


def _remove_directory(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _remove_records(unit_dir: str) -> None:
    """Delete a unit's record, manifest and rejects (not its shards)."""
    for name in (DONE_NAME, MANIFEST_NAME, REJECTS_NAME):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(unit_dir, name))


def publish(output: str, work_dir: str, plan: Mapping[str, Any]) -> None:
    """Carry out ``plan``: move unit shards into ``output`` and commit the manifest.

    Safe to call again after a crash at any point (see the module docstring).
    """
    if _already_published(output, plan):
        discard_work_dir(work_dir)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(output, MANIFEST_NAME))
    fsync_directory(output)
    units = sorted({unit_name for unit_name, _, _ in plan["moves"]})
    with ThreadPoolExecutor(_REMOVERS) as pool:
        # The saved plan, not the units' records, is the source of truth from now on:
        # delete the records while the shards move (deleting waits on the disk, see
        # remove_tree), so little is left to remove after the manifest.
        removals = pool.map(_remove_records, [os.path.join(work_dir, u) for u in units])
        for unit_name, source, target in plan["moves"]:
            # A source that is gone was moved by an earlier, interrupted attempt.
            with contextlib.suppress(FileNotFoundError):
                rename_atomically(  # ``output`` is fsynced once after every move
                    os.path.join(work_dir, unit_name, source), os.path.join(output, target)
                )
        for _ in removals:
            pass
    fsync_directory(output)
    keep = {entry[key] for entry in plan["entries"] for key in ("tokens", "offsets")}
    for name in os.listdir(output):
        stale = fnmatch.fnmatch(name, "shard-*.tokens") or fnmatch.fnmatch(name, "shard-*.offsets")
        if stale and name not in keep:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(output, name))
    commit_manifest(
        output,
        plan["entries"],
        dtype=plan["dtype"],
        vocab_size=plan["vocab_size"],
        metadata=plan["metadata"],
    )
    discard_work_dir(work_dir)
