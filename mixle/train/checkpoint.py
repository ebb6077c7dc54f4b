"""Crash-safe training checkpoints: atomic directories, JSON metadata, weights-only tensors.

Layout of one checkpoint, ``<directory>/step-00000120/``::

    model.pt            torch.save of {"model": state_dict, "optimizer": state_dict}
                        (tensors, numbers, strings only: read with weights_only=True)
    rank-00000.json     rank 0's data cursor (stream state_dict) and RNG states
    rank-00001.json     ... one per rank
    meta.json           format, version, step, world size, identity, config, progress,
                        the SHA-256 of every other file, and ``meta_sha256`` over
                        meta.json itself (canonical JSON without that key)

Writing is atomic. Every file goes into ``.tmp-step-00000120/``; each is fsynced; rank 0
writes ``meta.json`` last, fsyncs the directory, renames it to ``step-00000120`` and
fsyncs the parent. A crash at any moment leaves either the previous checkpoints alone
(plus a temporary directory that the next run removes) or the complete new one: a
directory named ``step-*`` is complete by construction. Older checkpoints are removed
only after the new one is in place (``keep_last``).

A checkpoint's step is the one its verified ``meta.json`` records, never its directory
name alone: a ``step-*`` directory whose name disagrees (a renamed checkpoint) is not
listed, so it is neither resumed from nor pruned, and a new checkpoint of the step its
name claims moves it aside to ``step-N.misnamed-step-M`` rather than being skipped.

Reading validates before anything is used: the format and version, the world size,
the run identity (corpus fingerprint, model shape, stream configuration — every
differing field named with both values), the SHA-256 of every file and of the
metadata, and the type of every restored value (:mod:`mixle.train.checkpoint_checks`),
so a malformed but re-sealed checkpoint is a :class:`CheckpointError`, never a crash.
Nothing is unpickled: metadata is bounded JSON and tensors load with
``torch.load(weights_only=True)``.

All ranks must share the checkpoint directory (one machine, or a shared filesystem).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mixle._checks import nonnegative_int, positive_int
from mixle._io import file_sha256, fsync_directory, fsync_file, rename_atomically, rename_durably
from mixle.errors import CheckpointError
from mixle.train.checkpoint_checks import (
    META_DIGEST_KEY,
    meta_sha256,
    read_json,
    validate_meta,
    validate_tensors,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "check_identity",
    "checkpoint_name",
    "latest_checkpoint",
    "list_checkpoints",
    "misnamed_checkpoints",
    "prune_checkpoints",
    "read_checkpoint",
    "read_meta",
    "read_rank_state",
    "remove_partial_checkpoints",
    "write_checkpoint",
]

CHECKPOINT_FORMAT = "mixle-checkpoint"
CHECKPOINT_VERSION = 1
MODEL_FILE = "model.pt"
META_FILE = "meta.json"
_NAME = re.compile(r"^step-(\d{8,})$")
_TMP_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    """``step-00000120``: the directory name of the checkpoint taken after ``step`` steps."""
    return f"step-{nonnegative_int('step', step):08d}"


def _rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=1, sort_keys=True, allow_nan=False)
        fsync_file(handle)


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    """Complete checkpoints under ``directory`` as ``(step, path)``, oldest first.

    A missing directory has none. Temporary (partial) directories are not listed, and
    neither is a ``step-*`` directory whose verified ``meta.json`` records another
    step than its name (a renamed checkpoint: see :func:`misnamed_checkpoints`), so
    a rename can never make an old checkpoint the newest. A directory whose metadata
    cannot be read or verified is listed by its name, and reading it then says why.
    """
    return _scan(directory)[0]


def misnamed_checkpoints(directory: str) -> list[tuple[str, int]]:
    """``(path, recorded step)`` of each ``step-*`` directory under ``directory`` whose
    verified ``meta.json`` records another step than its name; never resumed from,
    never pruned (the trainer names each one in its log)."""
    return _scan(directory)[1]


def _scan(directory: str) -> tuple[list[tuple[int, str]], list[tuple[str, int]]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    found: list[tuple[int, str]] = []
    misnamed: list[tuple[str, int]] = []
    for name in names:
        match = _NAME.match(name)
        path = os.path.join(directory, name)
        if not (match and os.path.isdir(path)):
            continue
        step = int(match.group(1))
        recorded = _recorded_step(path)
        if recorded is None or recorded == step:
            found.append((step, path))
        else:
            misnamed.append((path, recorded))
    return sorted(found), sorted(misnamed)


def _recorded_step(path: str) -> int | None:
    """The step the verified ``meta.json`` of ``path`` records; ``None`` when that
    metadata is missing or does not verify (reading the checkpoint reports why)."""
    try:
        return int(_read_meta(path)["step"])
    except CheckpointError:
        return None


def latest_checkpoint(directory: str) -> str | None:
    """Path of the newest complete checkpoint under ``directory``, or ``None``.

    Newest by the step its verified metadata records (see :func:`list_checkpoints`).
    """
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def remove_partial_checkpoints(directory: str) -> list[str]:
    """Delete leftovers of interrupted writes (``.tmp-*`` directories); return their paths."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        if name.startswith(_TMP_PREFIX):
            path = os.path.join(directory, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def prune_checkpoints(directory: str, keep_last: int) -> list[str]:
    """Delete all but the newest ``keep_last`` complete checkpoints; return what went."""
    keep = positive_int("keep_last", keep_last)
    doomed = [path for _, path in list_checkpoints(directory)[:-keep]]
    for path in doomed:
        # Rename first so a crash mid-delete never leaves a half-deleted ``step-*``.
        trash = os.path.join(directory, _TMP_PREFIX + "old-" + os.path.basename(path))
        rename_atomically(path, trash)  # renamed away to be deleted: no fsync
        shutil.rmtree(trash, ignore_errors=True)
    return doomed


def write_checkpoint(
    directory: str,
    step: int,
    *,
    rank: int,
    world_size: int,
    rank_state: Mapping[str, Any],
    tensors: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
    barrier: Callable[[], None] = lambda: None,
) -> str:
    """Write the checkpoint taken after ``step`` steps, atomically; return its path.

    Every rank calls this collectively (``barrier`` synchronises them; a no-op for a
    single process). Each rank writes its ``rank_state`` (JSON-able: its data cursor and
    RNG states); rank 0 also writes ``tensors`` (model and optimizer state dicts) and
    ``meta`` (JSON-able: identity, config, progress), then publishes the directory.
    An existing complete checkpoint for ``step`` is left as it is.

    Raises
    ------
    CheckpointError
        ``rank_state``/``meta`` is not JSON-serialisable.
    OSError
        The filesystem refused a write (the previous checkpoints are untouched).
    """
    name = checkpoint_name(step)
    final = os.path.join(directory, name)
    temporary = os.path.join(directory, _TMP_PREFIX + name)
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
        shutil.rmtree(temporary, ignore_errors=True)
        _move_misnamed(final, step)
        if not os.path.isdir(final):
            os.makedirs(temporary)
    barrier()
    exists = os.path.isdir(final)
    if not exists:
        try:
            _write_json(os.path.join(temporary, _rank_file(rank)), dict(rank_state))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"rank {rank} state is not JSON-serialisable: {exc}") from exc
    barrier()
    if rank == 0 and not exists:
        if tensors is None or meta is None:
            raise CheckpointError("rank 0 must pass `tensors` and `meta` to write_checkpoint.")
        import torch  # here, not at the top: listing and reading metadata need no torch

        model_path = os.path.join(temporary, MODEL_FILE)
        with open(model_path, "wb") as handle:
            torch.save(dict(tensors), handle)
            fsync_file(handle)
        files = [MODEL_FILE, *(_rank_file(r) for r in range(world_size))]
        document = {
            **dict(meta),
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "step": step,
            "world_size": world_size,
            "files": {f: file_sha256(os.path.join(temporary, f)) for f in files},
        }
        try:
            document[META_DIGEST_KEY] = meta_sha256(document)
            _write_json(os.path.join(temporary, META_FILE), document)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint metadata is not JSON-serialisable: {exc}") from exc
        fsync_directory(temporary)
        rename_durably(temporary, final)
    barrier()
    return final


def _move_misnamed(final: str, step: int) -> None:
    """Rename a directory occupying ``final`` whose verified metadata records another
    step to ``<final>.misnamed-step-<recorded>`` (kept, never listed), so the
    checkpoint of ``step`` is written there instead of being taken as present."""
    recorded = _recorded_step(final) if os.path.isdir(final) else None
    if recorded is not None and recorded != step:
        rename_atomically(final, f"{final}.misnamed-step-{recorded:08d}")
        fsync_directory(os.path.dirname(final))


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            flat.update(_flatten(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def check_identity(saved: Any, current: Mapping[str, Any], where: str) -> None:
    """Raise :class:`CheckpointError` naming every field where ``saved != current``.

    Nested dicts are compared field by field (``model.d_model``, ``corpus.fingerprint``).
    """
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"{where} has no identity record; it was not written by mixle train.")
    old, new = _flatten(saved), _flatten(current)
    differences = [
        f"{key} in checkpoint: {old.get(key, '<absent>')!r} / in this run: {new.get(key, '<absent>')!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key, "<absent>") != new.get(key, "<absent>")
    ]
    if differences:
        raise CheckpointError(
            f"{where} belongs to a different run: " + "; ".join(differences) + "."
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A validated checkpoint, as :func:`read_checkpoint` returns it."""

    path: str
    step: int
    meta: dict[str, Any]
    rank_state: dict[str, Any]
    tensors: dict[str, Any]


def _read_meta(path: str) -> dict[str, Any]:
    meta_path = os.path.join(path, META_FILE)
    if not os.path.lexists(meta_path):
        raise CheckpointError(f"{path} is not a checkpoint: it has no {META_FILE}.")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{meta_path} is not a {CHECKPOINT_FORMAT} metadata file.")
    if meta.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{meta_path} has checkpoint version {meta.get('version')!r}; this mixle reads "
            f"version {CHECKPOINT_VERSION}."
        )
    validate_meta(meta, meta_path)
    return meta


def read_meta(path: str) -> dict[str, Any]:
    """The verified ``meta.json`` of checkpoint directory ``path`` (no tensor is read,
    torch is not imported): format, version, fields and ``meta_sha256`` checked.

    Raises
    ------
    CheckpointError
        No ``meta.json``, another format or version, a malformed or edited field, or a
        directory named for another step than the one its metadata records.
    """
    meta = _read_meta(path)
    named = _NAME.match(os.path.basename(os.path.normpath(path)))
    if named and int(named.group(1)) != meta["step"]:
        raise CheckpointError(
            f"{path}: its {META_FILE} records step {meta['step']}, its name step "
            f"{int(named.group(1))}; a renamed checkpoint is not resumed from."
        )
    return meta


def _check_file(path: str, meta: Mapping[str, Any], name: str) -> None:
    """Raise :class:`CheckpointError` unless file ``name`` of checkpoint ``path`` is
    listed in its ``meta`` and has the SHA-256 recorded there."""
    files: dict[str, Any] = meta["files"]
    file_path = os.path.join(path, name)
    if name not in files:
        raise CheckpointError(f"{path}/{META_FILE} does not list {name}.")
    if not os.path.lexists(file_path):
        raise CheckpointError(f"{file_path} is missing.")
    actual = file_sha256(file_path, CheckpointError)
    if actual != files[name]:
        raise CheckpointError(
            f"{file_path} is corrupt: SHA-256 {actual}, the metadata records {files[name]}."
        )


def read_rank_state(path: str, meta: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """Rank ``rank``'s saved state (its data cursor and RNG states) in checkpoint
    ``path`` whose verified metadata is ``meta`` (:func:`read_meta`); torch-free.

    Raises
    ------
    CheckpointError
        The rank file is not listed, missing, of another SHA-256 than the metadata
        records, or not a JSON object.
    """
    name = _rank_file(rank)
    _check_file(path, meta, name)
    rank_path = os.path.join(path, name)
    rank_state = read_json(rank_path)
    if not isinstance(rank_state, dict):
        raise CheckpointError(f"{rank_path} must hold a JSON object.")
    return rank_state


def read_checkpoint(
    path: str,
    *,
    rank: int,
    world_size: int,
    identity: Mapping[str, Any] | None = None,
    map_location: Any = "cpu",
    elastic: bool = False,
) -> Checkpoint:
    """Read and validate one checkpoint directory for ``rank`` of ``world_size``.

    Parameters
    ----------
    elastic
        The run's data cursor is the same on every rank (global layout): a checkpoint
        written by another number of ranks is accepted, and a run of another size
        reads rank 0's state (its cursor, and its RNG states).

    identity
        The current run's identity; compared field by field with the saved one.
    map_location
        Where the tensors are loaded (``torch.load``'s argument).

    Raises
    ------
    CheckpointError
        Not a checkpoint, another format version, written by another number of ranks,
        another run identity (each difference named), a missing file or a SHA-256
        mismatch (file named), or a tensor file that is not weights-only loadable.
    """
    meta = read_meta(path)
    if elastic and meta["world_size"] != world_size:
        rank = 0
    elif meta["world_size"] != world_size:
        raise CheckpointError(
            f"{path} was written by {meta['world_size']} rank(s); this run has {world_size}. "
            "Resume with the same number of processes."
        )
    if identity is not None:
        check_identity(meta.get("identity"), identity, path)
    _check_file(path, meta, MODEL_FILE)
    rank_state = read_rank_state(path, meta, rank)
    import torch

    try:
        tensors = torch.load(
            os.path.join(path, MODEL_FILE), map_location=map_location, weights_only=True
        )
    except Exception as exc:  # any unpickling failure means the file is unusable
        raise CheckpointError(
            f"{path}/{MODEL_FILE} cannot be loaded as weights-only tensors: {exc}"
        ) from exc
    validate_tensors(tensors, f"{path}/{MODEL_FILE}")
    return Checkpoint(path, int(meta["step"]), meta, rank_state, tensors)
