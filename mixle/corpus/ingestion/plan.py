"""The ingest plan: every work unit of an ingest, a pure function of inputs and options.

Step one of the three public steps of an ingest (plan, run one unit, commit; see
:mod:`.units` and :mod:`.commit`). A plan holds the provenance recorded in the
manifest (``source``), the identity of every input file (path, size, mtime), the work
units, and what a worker needs to convert one (``job``). It never depends on the
worker count or the executor, so every machine that computes the plan of the same
command gets the same plan, and :attr:`IngestPlan.plan_id` names it: a unit record
carries the id of the plan it was converted for, and commit refuses records of any
other plan.

A plan is JSON (never pickle) with a format ``version``: :meth:`IngestPlan.write` /
:meth:`IngestPlan.read`; :meth:`IngestPlan.check_inputs` tells whether the inputs are
still the files the plan was made of.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mixle._file_checks import check_name_lengths, read_regular
from mixle._io import atomic_write_bytes, file_sha256, temporary_name
from mixle._safe_json import loads_bounded
from mixle._version import __version__
from mixle.corpus.format.manifest import canonical_json
from mixle.corpus.format.spec import resolve_dtype
from mixle.corpus.ingestion.formats import get_format, input_formats
from mixle.corpus.ingestion.input_readers import ReadOptions, make_tokenizer
from mixle.corpus.ingestion.inputs import InputFile, WorkUnit, plan_units, resolve_inputs
from mixle.corpus.ingestion.options import IngestOptions
from mixle.corpus.ingestion.plan_checks import compare_units, parse_plan
from mixle.corpus.ingestion.workers import UnitJob
from mixle.errors import ArgumentError, IngestError

__all__ = ["PLAN_VERSION", "IngestPlan", "plan_differences", "plan_ingest", "recorded_options"]

#: Format version of a plan file; :meth:`IngestPlan.from_dict` refuses any other.
PLAN_VERSION = 1
#: Largest plan file read (a plan of a million units is about 250 MB).
MAX_PLAN_BYTES = 1 << 30


def recorded_options(options: IngestOptions) -> dict[str, Any]:
    """The options that shape the output, as recorded in the plan and the manifest.

    Checks the tokenizer first (fails fast on a missing package or unreadable file).
    """
    tokenizer_id: Any = options.tokenizer
    tokenizer = options.tokenizer
    if tokenizer is not None and tokenizer != "bytes":
        if not os.path.isfile(tokenizer):
            raise ArgumentError(
                f"`tokenizer` must be 'bytes' or a tokenizer.json file. {tokenizer!r} does not exist."
            )
        make_tokenizer(tokenizer)  # fail fast: missing package or unreadable file
        tokenizer_id = {"file": os.path.basename(tokenizer), "sha256": file_sha256(tokenizer)}
    recorded = {
        "input_format": options.input_format,
        "field": list(options.fields),
        "tokenizer": tokenizer_id,
        "split": options.split,
        "append_eos": options.append_eos,
        "shard_size": options.shard_size,
        "vocab_size": options.vocab_size,
        "dtype": options.dtype,
        "on_error": options.on_error,
        "unit_size": options.unit_size,
    }
    if options.id_field is not None:  # only when given: older plans and manifests keep their bytes
        recorded["id_field"] = options.id_field
    return recorded


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """The work units of one ingest and everything needed to convert and commit them.

    Attributes
    ----------
    source
        Provenance written into the manifest's ``metadata["source"]``: tool, version,
        the inputs as given, and the recorded options.
    files, units
        The resolved input files (with size and mtime, so a changed input is noticed)
        and the work units, in corpus order.
    job
        What a worker needs besides the unit: fields, tokenizer path, split,
        ``append_eos``, ``vocab_size``, fixed dtype (or ``None``), shard size, ``on_error``.
    """

    source: Mapping[str, Any]
    files: tuple[InputFile, ...]
    units: tuple[WorkUnit, ...]
    job: Mapping[str, Any]

    @property
    def plan_id(self) -> str:
        """SHA-256 over the canonical JSON of ``source``, ``files`` and ``units``.

        ``job`` is left out: it repeats ``source``'s options except the tokenizer
        path, which may differ between machines while its recorded digest does not.
        """
        body = {key: value for key, value in self.to_dict().items() if key != "job"}
        return hashlib.sha256(canonical_json(body)).hexdigest()

    @property
    def dtype(self) -> str | None:
        """The token dtype fixed by the options, or ``None`` (decided from the data)."""
        fixed: str | None = self.job["dtype"]
        return fixed

    @property
    def vocab_size(self) -> int | None:
        """The vocabulary size of the options, or ``None``."""
        vocab: int | None = self.job["vocab_size"]
        return vocab

    def require_distributable(self) -> None:
        """Refuse a plan whose units cannot run independently (distributed).

        Raises
        ------
        ArgumentError
            The token dtype is not fixed (each unit would pick its own, and the widest
            is known only after a second pass over every unit).
        """
        if self.dtype is None:
            raise ArgumentError(
                "distributed ingestion (--executor dask, --task i/n, --write-plan, run_unit) "
                "needs the token dtype before any unit runs: pass --vocab-size N (e.g. "
                "--vocab-size 50257) or --dtype uint16|uint32|int64 (vocab_size=/dtype= in "
                "Python)."
            )

    def unit_job(self) -> UnitJob:
        """The :class:`UnitJob` every unit of this plan is converted with."""
        job = self.job
        return UnitJob(
            ReadOptions(tuple(job["fields"]), job["tokenizer"], job["split"], job.get("id_field")),
            job["append_eos"],
            job["vocab_size"],
            job["dtype"],
            job["shard_size"],
            job["on_error"],
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able plan (what :meth:`write` stores)."""
        return {
            "version": PLAN_VERSION,
            "source": json.loads(json.dumps(self.source)),
            "files": [item.to_dict() for item in self.files],
            "units": [unit.to_dict() for unit in self.units],
            "job": dict(self.job),
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "the plan") -> IngestPlan:
        """Rebuild a plan from :meth:`to_dict`'s output, checking every part of it.

        Besides the shape (keys, types), the worker ``job`` must be the one the
        recorded options imply and the units must fit the plan's files (see
        :func:`~mixle.corpus.ingestion.plan_checks.parse_plan`); whether they are the
        units the inputs imply is :meth:`check_inputs`'s question.

        Raises
        ------
        IngestError
            ``value`` is not a plan of this format version, or a part of it is
            malformed or inconsistent (names ``where``, the unit or key, and the field).
        """
        version = value.get("version") if isinstance(value, dict) else None
        if version != PLAN_VERSION:
            raise IngestError(
                f"{where}: plan format version {version!r} is not the version this mixle "
                f"reads ({PLAN_VERSION}); make the plan again with this mixle."
            )
        source, files, units, job = parse_plan(value, where)
        return cls(source, files, units, job)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the plan to ``path`` as JSON, atomically (safe to race with itself)."""
        target = os.fspath(path)
        check_name_lengths(os.path.abspath(target), "plan file")
        # A unique temporary name: several machines may write the same file at once.
        temporary = temporary_name(target, unique=True)
        data = json.dumps(self.to_dict(), sort_keys=True, indent=1).encode("utf-8")
        atomic_write_bytes(target, data, temporary=temporary)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> IngestPlan:
        """Read a plan written by :meth:`write`.

        Raises
        ------
        IngestError
            The file is missing, not JSON, not a plan or of another format version
            (the message names the file).
        """
        name = os.fspath(path)
        try:
            value = loads_bounded(
                read_regular(name, IngestError, MAX_PLAN_BYTES), name, IngestError
            )
        except IngestError as exc:
            detail = str(exc).removeprefix(f"{name}: ")
            raise IngestError(f"cannot read the ingest plan {name}: {detail}") from exc
        if not isinstance(value, dict):
            raise IngestError(f"{name} is not an ingest plan (not a JSON object).")
        return cls.from_dict(value, f"ingest plan {name}")

    def check_inputs(self, where: str = "the plan") -> None:
        """Check that the inputs still resolve to the files of the plan (names, sizes,
        mtimes), that the units are exactly those these files and the recorded options
        imply, and that a tokenizer file is the recorded one, so units run from a plan
        file convert what was planned (``where`` names the plan in messages).

        Raises
        ------
        IngestError
            An input is missing, or has changed or appeared since the plan was made
            (the changed files are named); a unit differs from the implied ones (unit
            and field named); the tokenizer file's digest is not the recorded one.
        """
        options = self.source["options"]
        files = resolve_inputs(list(self.source["inputs"]), options["input_format"])
        planned = {item.path: item for item in self.files}
        found = {item.path: item for item in files}
        changed = [path for path in planned if path in found and found[path] != planned[path]]
        missing = [path for path in planned if path not in found]
        added = [path for path in found if path not in planned]
        problems = [
            f"{label}: {', '.join(paths[:5])}{' ...' if len(paths) > 5 else ''}"
            for label, paths in (("changed", changed), ("missing", missing), ("new", added))
            if paths
        ]
        if problems or list(planned) != list(found):
            raise IngestError(
                f"{where}: the inputs are no longer the files the plan was made of "
                f"({'; '.join(problems) or 'in another order'}); make the plan again "
                "(--write-plan) from the current inputs."
            )
        unit_size, shard_size = options["unit_size"], options["shard_size"]
        compare_units(self.units, plan_units(files, unit_size, max(unit_size, shard_size)), where)
        recorded = options["tokenizer"]
        if isinstance(recorded, dict):
            digest = file_sha256(self.job["tokenizer"], IngestError)
            if digest != recorded["sha256"]:
                raise IngestError(
                    f"{where}: the tokenizer file {self.job['tokenizer']} has SHA-256 "
                    f"{digest[:16]}..., the plan records {recorded['sha256'][:16]}...; make "
                    "the plan again (--write-plan) with the current tokenizer."
                )


def plan_ingest(inputs: Any, options: IngestOptions) -> IngestPlan:
    """Resolve ``inputs`` and cut them into work units: step one of an ingest.

    A pure function of the inputs (names, sizes, mtimes, headers) and ``options``;
    never of ``workers``, the executor or the machine.

    Parameters
    ----------
    inputs
        A path, directory, glob or fsspec URL, or a list of them (see
        :func:`mixle.corpus.ingest`).
    options
        The validated options.

    Raises
    ------
    IngestError
        An input cannot be found or read.
    ArgumentError
        The tokenizer file does not exist.
    """
    input_list = [
        os.fspath(item) for item in ([inputs] if isinstance(inputs, str | os.PathLike) else inputs)
    ]
    source = {
        "tool": "mixle ingest",
        "version": __version__,
        "inputs": input_list,
        "options": recorded_options(options),
    }
    files = resolve_inputs(input_list, options.input_format)
    if options.id_field is not None:
        _check_named_fields(files)
    # Ids of flat inputs go to disk as they are, so a unit of one shard's worth of ids
    # yields one full shard (fewer, larger shards; fewer fsyncs).
    units = plan_units(files, options.unit_size, max(options.unit_size, options.shard_size))
    job = {
        "fields": list(options.fields),
        "tokenizer": options.tokenizer,
        "split": options.split,
        "append_eos": options.append_eos,
        "vocab_size": options.vocab_size,
        "dtype": resolve_dtype(
            options.vocab_size, None if options.dtype == "auto" else options.dtype
        ),
        "shard_size": options.shard_size,
        "on_error": options.on_error,
    }
    if options.id_field is not None:
        job["id_field"] = options.id_field
    return IngestPlan(source, tuple(files), tuple(units), job)


def _check_named_fields(files: Sequence[InputFile]) -> None:
    """Refuse ``--id-field`` for inputs whose records have no named fields.

    Raises
    ------
    ArgumentError
        An input's format has no fields to name (names the file and the formats that do).
    """
    for item in files:
        if not get_format(item.format).named_fields:
            named = [form.name for form in input_formats() if form.named_fields]
            raise ArgumentError(
                f"`id_field` (--id-field) names a field of each record, but {item.path} is "
                f"{item.format} input, whose records have none (formats with fields: "
                f"{', '.join(named)})."
            )


def plan_differences(
    previous: Mapping[str, Any], plan: Mapping[str, Any], label: str = "the existing plan"
) -> list[str]:
    """What differs between two plans (as dicts), one line per difference, both sides.

    ``label`` names ``previous`` in the lines (``"<key> in <label>: old / now: new"``).
    """
    differences = []
    options, before = plan["source"]["options"], previous["source"]["options"]
    for key in [*options, *(key for key in before if key not in options)]:
        old, value = before.get(key), options.get(key)
        if old != value:
            differences.append(f"{key} in {label}: {old!r} / now: {value!r}")
    if previous["source"]["inputs"] != plan["source"]["inputs"]:
        differences.append(
            f"inputs in {label}: {previous['source']['inputs']} / now: {plan['source']['inputs']}"
        )
    elif previous["files"] != plan["files"]:
        changed = [
            new["path"]
            for old, new in zip(previous["files"], plan["files"], strict=False)
            if old != new
        ] or ["(number of files)"]
        differences.append(f"input files changed since {label}: {changed[:5]}")
    if not differences and previous["units"] != plan["units"]:
        differences.append("work units differ (mixle version changed?)")
    return differences
