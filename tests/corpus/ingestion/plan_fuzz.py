"""Mutation fuzzing of ingest plan files and unit completion records (issue #32).

Run as ``python -m tests.corpus.ingestion.plan_fuzz KIND COUNT SEED``: builds a small
ingest (two JSONL inputs, two text files, many units), then ``COUNT`` times mutates
one file of ``KIND`` and hands it to mixle under a per-input timeout. Prints one JSON
line of counts:

``inputs``
    mutated inputs tried.
``refused``
    inputs mixle refused with its own error (a :class:`~mixle.errors.CorpusError`).
``accepted``
    inputs mixle accepted; each one must give exactly the intact result.
``raw``
    inputs where any other exception escaped (the first few in ``examples``).
``hangs``
    inputs that did not finish within the per-input timeout.
``wrong``
    accepted inputs whose result differs from the intact one (silent change).
``provenance_only``
    (``plan`` only) accepted inputs whose units, worker job and files are intact but
    whose provenance labels were edited (``source.version``; ``source.inputs`` spelled
    otherwise, e.g. an input repeated, naming the same files; ``source.options``
    spelled otherwise with the same implied job, e.g. ``dtype`` "auto" vs "uint16"
    under ``vocab_size`` 1000): shards, documents and fingerprint are the intact ones;
    the manifest's ``metadata.source`` records the labels as the plan gives them.
``rejects_report_differs``
    (``record`` only) accepted inputs whose corpus is the intact one but whose rejects
    report (a side report, not part of the corpus) says other things: the text and
    locations of a unit's own rejects list cannot be checked without reading the
    inputs, which the commit never does (see docs/ingest.md). Only an edit of the
    rejects list that keeps its shape and count lands here. An edit of a record's
    ``lines`` (which places the line origins of the later units of its file, and
    numbers the report's lines) is refused by the record's ``record_sha256``, so a
    ``done.json`` edit that changes the report is ``wrong``.

Kinds:

``plan``
    ``--plan PLAN.json``: the plan file is mutated; accepted means the loaded plan
    (units, worker job, files, options) is the intact one, and for the first few
    accepted inputs the units are run and the corpus compared byte for byte.
``record``
    ``mixle ingest --commit``: one unit's ``done.json`` or ``manifest.json`` (or, under
    ``on_error="skip"``, its ``rejects.jsonl``) is mutated in a copy of a finished
    task-array output; accepted means the published corpus is the intact one, file for
    file.

Mutations are structure-aware (change, delete, add, duplicate or swap a JSON node;
interesting integers, strings naming other files, deep nesting) and byte-level (the
shared :func:`tests.corpus.fuzz_harness.mutate`).
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.corpus.fuzz_harness import mutate
from tests.corpus.hardening_helpers import Hang, deadline
from tests.corpus.ingestion.distributed_helpers import make_inputs, tree

KINDS = ("plan", "record")
PER_INPUT_SECONDS = 20.0
#: Accepted plans whose units are actually run and compared (the rest are compared
#: as plans: the corpus is a pure function of the units and the job).
RUN_ACCEPTED = 5
OPTIONS: dict[str, Any] = {"unit_size": 2048, "shard_size": 1024, "vocab_size": 1000}
_INTERESTING: list[Any] = [
    0,
    1,
    -1,
    7,
    2048,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63),
    1.5,
    1e308,
    True,
    False,
    None,
    "",
    "x",
    "uint16",
    "uint32",
    "int64",
    "float64",
    "jsonl",
    "text",
    "npy",
    "skip",
    "raise",
    "/dev/zero",
    "../../etc/passwd",
    [],
    {},
    [1, 2],
    {"a": 1},
]


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (keys and indices), the root included."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_nodes(item, (*path, key)))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found.extend(_nodes(item, (*path, position)))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _strings(value: Any) -> list[str]:
    return [node for node in (_get(value, path) for path in _nodes(value)) if isinstance(node, str)]


def mutate_json(value: Any, rng: random.Random) -> Any:
    """``value`` (a JSON document) with 1-3 structure-aware mutations."""
    value = copy.deepcopy(value)
    for _ in range(rng.randint(1, 3)):
        paths = _nodes(value)
        path = rng.choice(paths[1:] or paths)
        if not path:
            return rng.choice(_INTERESTING)
        parent, last = _get(value, path[:-1]), path[-1]
        node = parent[last]
        op = rng.randrange(9)
        if op == 0:
            parent[last] = copy.deepcopy(rng.choice(_INTERESTING))
        elif op == 1 and isinstance(node, int) and not isinstance(node, bool):
            parent[last] = node + rng.choice((-1, 1, -100, 100, -2048, 2048))
        elif op == 2:
            del parent[last]
        elif op == 3 and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(node))  # duplicate
        elif op == 4 and isinstance(parent, list) and len(parent) > 1:
            other = rng.randrange(len(parent))
            parent[last], parent[other] = parent[other], parent[last]
        elif op == 5 and isinstance(parent, dict):
            parent[rng.choice(["extra", "paths", "index", "dtype", "shards"])] = node
        elif op == 6:
            strings = _strings(value)
            parent[last] = rng.choice(strings) if strings else ""
        elif op == 7:
            nested: Any = node
            for _ in range(rng.choice((2, 70, 1000))):
                nested = [nested]
            parent[last] = nested
            break  # the other operations walk the tree recursively
        else:
            same_kind = [
                p for p in paths if len(p) == len(path) and p != path and p[:-2] == path[:-2]
            ]
            if same_kind:
                parent[last] = copy.deepcopy(_get(value, rng.choice(same_kind)))
    return value


def mutated_bytes(value: Any, rng: random.Random) -> bytes:
    """A mutated serialization of ``value``: structure-aware, byte-level, or both."""
    choice = rng.random()
    document = mutate_json(value, rng) if choice < 0.8 else value
    try:
        data = json.dumps(document, sort_keys=rng.random() < 0.5, indent=rng.choice((None, 1)))
    except (RecursionError, ValueError):
        data = "[" * 100_000
    raw = data.encode("utf-8")
    return mutate(raw, rng) if choice > 0.6 else raw


class _Inputs:
    """The inputs and intact results every mutation is compared with."""

    def __init__(self, base: Path) -> None:
        self.base = base
        data = base / "data"
        data.mkdir()
        self.inputs = make_inputs(data, count=60)
        for number in range(2):
            (data / f"t-{number}.txt").write_text(f"text file {number}\n\nsecond paragraph\n")
        self.inputs += [str(data / "t-0.txt"), str(data / "t-1.txt")]


class PlanFuzzer:
    """``--plan`` files: a mutated plan is refused, or loads as the intact plan."""

    def __init__(self, base: Path) -> None:
        from mixle.corpus import IngestOptions, ingest, plan_ingest

        self.base = base
        self.setup = _Inputs(base)
        self.plan = plan_ingest(self.setup.inputs, IngestOptions(**OPTIONS))
        self.value = self.plan.to_dict()
        self.path = base / "plan.json"
        self.intact = base / "intact"
        ingest([], self.intact, plan=self.plan, workers=1)
        self.expected = tree(self.intact)
        self.runs = 0

    def _same_plan(self, plan: Any) -> bool:
        ours = self.plan
        return bool(
            plan.units == ours.units
            and plan.unit_job() == ours.unit_job()
            and plan.files == ours.files
        )

    def once(self, rng: random.Random) -> str:
        from mixle.corpus import IngestOptions, ingest
        from mixle.corpus.ingestion.executors import load_plan
        from mixle.errors import CorpusError

        self.path.write_bytes(mutated_bytes(self.value, rng))
        try:
            with deadline(PER_INPUT_SECONDS):
                loaded = load_plan([], IngestOptions(plan=str(self.path)))
        except CorpusError:
            return "refused"
        if not self._same_plan(loaded):
            return "wrong: an edited plan was accepted with other units, job or files"
        provenance_only = loaded.source != self.plan.source
        if self.runs < RUN_ACCEPTED:
            self.runs += 1
            out = self.base / "run"
            shutil.rmtree(out, ignore_errors=True)
            with deadline(PER_INPUT_SECONDS * 6):
                ingest([], out, plan=str(self.path), workers=1)
            if _without_provenance(tree(out)) != _without_provenance(self.expected):
                return "wrong: an accepted plan gave another corpus"
        return "provenance_only" if provenance_only else "accepted"


def _without_provenance(files: dict[str, bytes]) -> dict[str, Any]:
    """The files of a corpus with the manifest's provenance labels left out: the mixle
    ``version``, the ``inputs`` as given and the ``options`` as recorded (which an edit
    may spell differently while they name the same files and imply the same units and
    worker job, e.g. ``dtype`` "auto" and "uint16" with ``vocab_size`` 1000; the files,
    units and job themselves are checked). Documents, shards and fingerprint stay
    compared byte for byte."""
    result: dict[str, Any] = dict(files)
    if "manifest.json" in result:
        manifest = json.loads(result["manifest.json"])
        for key in ("version", "inputs", "options"):
            manifest["metadata"]["source"].pop(key, None)
        manifest.pop("manifest_sha256", None)
        result["manifest.json"] = manifest
    return result


class RecordFuzzer:
    """``--commit`` of an output whose unit records were mutated: refused, or the
    intact corpus."""

    def __init__(self, base: Path) -> None:
        from mixle.corpus import IngestOptions, commit_ingest, plan_ingest, run_unit

        self.base = base
        self.setup = _Inputs(base)
        with open(self.setup.inputs[0], "a") as handle:  # a few rejects for the skip case
            handle.write('{"input_ids": [1, -2]}\nnot json\n')
        self.templates: dict[str, Path] = {}
        self.expected: dict[str, dict[str, bytes]] = {}
        for on_error in ("raise", "skip"):
            options = dict(OPTIONS, on_error=on_error)
            if on_error == "raise":
                options["unit_size"] = 4096  # the bad lines then fall in one unit...
            plan = plan_ingest(
                self.setup.inputs[1:] if on_error == "raise" else self.setup.inputs,
                IngestOptions(**options),
            )
            template = base / f"template-{on_error}"
            for index in range(len(plan.units)):
                run_unit(plan, index, template)
            intact = base / f"intact-{on_error}"
            shutil.copytree(template, intact)
            commit_ingest(intact)
            self.templates[on_error] = template
            self.expected[on_error] = tree(intact)

    def once(self, rng: random.Random) -> str:
        from mixle.corpus import commit_ingest
        from mixle.errors import CorpusError

        on_error = rng.choice(("raise", "skip"))
        template = self.templates[on_error]
        out = self.base / "out"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(template, out)
        work = out / ".mixle-ingest"
        unit = rng.choice(sorted(p for p in work.iterdir() if p.name.startswith("unit-")))
        files = ["done.json"] * 6 + ["manifest.json"] * 2
        if (unit / "rejects.jsonl").exists():
            files += ["rejects.jsonl"] * 2
        target = unit / rng.choice(files)
        original = target.read_bytes()
        if target.name == "rejects.jsonl":
            data = mutate(original, rng)
        else:
            data = mutated_bytes(json.loads(original), rng)
        target.write_bytes(data)
        try:
            with deadline(PER_INPUT_SECONDS):
                commit_ingest(out)
        except CorpusError:
            return "refused"
        found = tree(out)
        expected = self.expected[on_error]
        if {k: v for k, v in found.items() if k != "rejects.jsonl"} != {
            k: v for k, v in expected.items() if k != "rejects.jsonl"
        }:
            return f"wrong: {target.relative_to(out)} mutated, another corpus was published"
        if found.get("rejects.jsonl") != expected.get("rejects.jsonl"):
            if target.name == "rejects.jsonl":
                return "rejects_report_differs"
            return f"wrong: {target.relative_to(out)} mutated, another rejects report"
        return "accepted"


def run(kind: str, count: int, seed: int) -> dict[str, Any]:
    """Try ``count`` mutated inputs of ``kind``; return the counts (see the module doc)."""
    rng = random.Random(seed)
    counts: dict[str, Any] = {
        "kind": kind,
        "inputs": 0,
        "refused": 0,
        "accepted": 0,
        "raw": 0,
        "hangs": 0,
        "wrong": 0,
        "provenance_only": 0,
        "rejects_report_differs": 0,
        "examples": [],
    }
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix=f"mixle-fuzz-{kind}-", dir=root) as base:
        fuzzer: PlanFuzzer | RecordFuzzer = (
            PlanFuzzer(Path(base)) if kind == "plan" else RecordFuzzer(Path(base))
        )
        for _ in range(count):
            counts["inputs"] += 1
            try:
                outcome = fuzzer.once(rng)
            except Hang:
                outcome = "hang"
            except Exception as exc:  # counting what escapes is the point
                outcome = f"raw: {type(exc).__name__}: {str(exc)[:200]}"
            if outcome in ("refused", "accepted", "provenance_only", "rejects_report_differs"):
                counts[outcome] += 1
                continue
            key = "hangs" if outcome == "hang" else outcome.split(":", 1)[0]
            counts[key] += 1
            if len(counts["examples"]) < 5:
                counts["examples"].append(outcome)
    return counts


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
