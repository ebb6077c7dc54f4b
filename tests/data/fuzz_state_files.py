"""Mutation fuzzing of the data layer's state files (issue #32): mixture files, epoch-plan
files and ``StatefulDataLoader`` states.

Run as ``python -m tests.data.fuzz_state_files KIND COUNT SEED``: builds a valid seed of
``KIND``, then ``COUNT`` times mutates it and reads it through mixle under a per-input
timeout. Prints one JSON line of counts, as ``tests/corpus/fuzz_harness.py`` does:
``inputs``, ``clean`` (mixle's own error, or an accepted input that checks out),
``raw`` (any other exception), ``hangs`` (past the per-input timeout), ``wrong`` (a
silent change: a mutated plan file that gives other batches, a mutated mixture file
accepted with other sources or weights than an independent parse gives, a loader state
accepted although its workers do not add up or resuming at another batch) and
``accepted`` (mutated inputs mixle accepted, all checked; for plan files, those loaded as
they are rather than rebuilt).

Kinds:

``mixture.toml``, ``mixture.json``
    Byte mutations of a mixture file; an accepted one is compared with ``tomllib`` /
    ``json`` and then built into a ``Mixture`` whose first rows are read.
``plan-global``, ``plan-per-rank``, ``plan-mixture``
    Byte mutations of one epoch-plan file (``PlanFiles``); a fresh stream with the store
    must give exactly the batches of a stream without one, or a ``CorpusError``.
``loader-state``
    Structural mutations of a real 3-worker ``StatefulDataLoader`` state (keys removed,
    worker snapshots copied or swapped, values replaced by odd ones);
    ``loader_state_for`` must refuse it, or accept it only when an independent check
    finds workers ``0 .. n-1`` once each and it must resume at the earliest saved batch.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.corpus.fuzz_harness import mutate
from tests.corpus.hardening_helpers import Hang, deadline

KINDS = (
    "mixture.toml",
    "mixture.json",
    "plan-global",
    "plan-per-rank",
    "plan-mixture",
    "loader-state",
)
PER_INPUT_SECONDS = 10.0

# Equal lengths (pre-chunked data): a wrong index still passes the sampled length check.
_DOCUMENTS = [np.arange(i * 8, i * 8 + 8, dtype=np.int64) % 991 for i in range(96)]
_SMALL = [np.arange(i * 5, i * 5 + 5, dtype=np.int64) % 991 for i in range(20)]
_MIXTURE_TOML = """
[[source]]
name = "web"
path = "web"
weight = 0.7
max_epochs = 40

[[source]]
name = "code"
path = "code"
weight = 0.3

[[phase]]
start_row = 16
weights = { web = 0.5, code = 0.5 }
"""
_INTERESTING: list[Any] = [
    1e308,
    10**400,
    5e-324,
    "cafe\u0301",
    "caf\u00e9",
    -1,
    0,
    1,
    2,
    3,
    2**31,
    2**63 - 1,
    2**63,
    2**64 + 1,
    10**40,
    1.5,
    True,
    None,
    "0",
    "worker_0",
    [],
    {},
]


# -- mixture files ---------------------------------------------------------------------
def _mixture_seed(kind: str) -> bytes:
    if kind == "mixture.toml":
        return _MIXTURE_TOML.encode()
    return json.dumps(tomllib.loads(_MIXTURE_TOML)).encode()


def _reference_sources(kind: str, data: bytes) -> list[tuple[Any, float]] | None:
    """``[(name, weight)]`` by the standard library's parser, or ``None`` if it fails."""
    try:
        parsed = tomllib.loads(data.decode()) if kind == "mixture.toml" else json.loads(data)
        return [(entry["name"], float(entry["weight"])) for entry in parsed["source"]]
    except Exception:
        return None


def _check_mixture_file(kind: str, data: bytes, directory: str) -> tuple[str, int]:
    from mixle.data import Mixture, MixtureSource
    from mixle.data._mixture_file import read_mixture_file
    from mixle.errors import CorpusError

    path = os.path.join(directory, "mix.toml" if kind == "mixture.toml" else "mix.json")
    Path(path).write_bytes(data)
    try:
        spec = read_mixture_file(path)
    except CorpusError:
        return "clean", 0
    reference = _reference_sources(kind, data)
    got = [(s.name, s.weight) for s in spec.sources]
    if reference != got:
        return f"wrong: accepted sources {got!r}, reference {reference!r}", 1
    try:
        sources = [
            MixtureSource(_DOCUMENTS if i % 2 == 0 else _SMALL, s.weight, s.name, s.max_epochs)
            for i, s in enumerate(spec.sources)
        ]
        mixture = Mixture(sources, block=4, batch_size=2, phases=spec.phases)
        mixture.rows_at(0, 40)
    except CorpusError:
        return "clean", 1
    return "clean", 1


# -- plan files --------------------------------------------------------------------------
def _streaming(store: Any, layout: str) -> Any:
    from mixle.data.streaming_corpus import StreamingCorpus

    return StreamingCorpus(
        _DOCUMENTS,
        rank=1,
        world_size=3,
        block=8,
        batch_size=2,
        layout=layout,
        boundary_id=999,
        plan_store=store,
        order="permutation",  # the order whose plans a store keeps
    )


def _mixture(store: Any) -> Any:
    from mixle.data import Mixture, MixtureSource

    sources = [MixtureSource(_DOCUMENTS, 0.6, "big"), MixtureSource(_SMALL, 0.4, "small")]
    return Mixture(
        sources, block=6, batch_size=2, boundary_id=999, plan_store=store, order="permutation"
    )


def _plan_rows(kind: str, store: Any) -> list[np.ndarray]:
    """Everything the plans decide, as arrays: the epoch's batches, or mixture rows."""
    if kind == "plan-mixture":
        return [np.array(a) for a in _mixture(store).rows_at(0, 120)]
    corpus = _streaming(store, "global" if kind == "plan-global" else "per-rank")
    rows = [np.array(a) for batch in corpus.epoch_batches(0) for a in batch]
    return [np.array([corpus.num_batches(0)]), *rows]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(map(np.array_equal, a, b))


# -- loader states ---------------------------------------------------------------------
def _dataset() -> Any:
    from mixle.data import StreamingCorpus
    from mixle.data.torch import StreamingDataset

    corpus = StreamingCorpus(
        _DOCUMENTS, rank=1, world_size=2, block=16, batch_size=3, layout="global"
    )
    return StreamingDataset(corpus, num_epochs=2)


def _loader_seed() -> dict[str, Any]:
    """A real 3-worker ``StatefulDataLoader`` state after 5 batches (JSON round-tripped)."""
    import warnings

    from torchdata.stateful_dataloader import StatefulDataLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = StatefulDataLoader(
            _dataset(), batch_size=None, num_workers=3, multiprocessing_context="fork"
        )
        iterator = iter(loader)
        for _ in range(5):
            next(iterator)
        state = loader.state_dict()
        del iterator
    result: dict[str, Any] = json.loads(json.dumps(state))
    return result


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every dict entry and list item of ``tree``."""
    found: list[tuple[Any, ...]] = []
    items = (
        tree.items()
        if isinstance(tree, dict)
        else enumerate(tree)
        if isinstance(tree, list)
        else ()
    )
    for key, value in items:
        found.append((*path, key))
        found.extend(_nodes(value, (*path, key)))
    return found


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        tree = tree[key]
    return tree


def mutate_state(state: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``state`` (a loader state, or a parsed mixture file) with 1-3 structural mutations."""
    state = copy.deepcopy(state)
    for _ in range(rng.randint(1, 3)):
        snapshot = state.get("_snapshot")
        workers = snapshot.get("_worker_snapshots") if isinstance(snapshot, dict) else None
        op = rng.randrange(5)
        if op == 0 and isinstance(workers, dict) and workers:  # copy a worker over another
            source = rng.choice(sorted(workers, key=str))
            target = rng.choice([*sorted(workers, key=str), f"worker_{rng.randrange(5)}"])
            workers[target] = copy.deepcopy(workers[source])
            continue
        if op == 1 and isinstance(workers, dict) and len(workers) > 1:  # swap two states
            a, b = rng.sample(sorted(workers, key=str), 2)
            if isinstance(workers[a], dict) and isinstance(workers[b], dict):
                workers[a]["dataset_state"], workers[b]["dataset_state"] = (
                    workers[b].get("dataset_state"),
                    workers[a].get("dataset_state"),
                )
            continue
        nodes = _nodes(state)
        if not nodes:
            break
        path = rng.choice(nodes)
        parent = _parent(state, path)
        if op == 2 and isinstance(parent, dict):  # remove a key
            del parent[path[-1]]
        elif (
            op == 3 and isinstance(parent[path[-1]], int) and not isinstance(parent[path[-1]], bool)
        ):
            parent[path[-1]] += rng.choice((-2, -1, 1, 2, 2**63))  # a nearby or huge int
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(_INTERESTING))
    return state


def _reference_workers(state: Any) -> list[tuple[int, int, dict[str, Any]]] | None:
    """Independent check: ``[(worker, num_workers, dataset state)]`` if the state's
    workers are ``0 .. n-1`` once each, consistently labelled; else ``None``."""
    try:
        if "_snapshot" not in state:
            item = state["dataset_state"]
            return (
                [(0, 1, item)]
                if (item["stream"]["worker"], item["stream"]["num_workers"]) == (0, 1)
                else None
            )
        snapshot = state["_snapshot"]
        count = snapshot["_main_snapshot"]["_num_workers"]
        snapshots = snapshot["_worker_snapshots"]
        if type(count) is not int or sorted(snapshots) != [f"worker_{w}" for w in range(count)]:
            return None
        found = []
        for worker in range(count):
            entry = snapshots[f"worker_{worker}"]
            item = entry["dataset_state"]
            labels = (entry["worker_id"], item["stream"]["worker"], item["stream"]["num_workers"])
            if any(type(v) is not int for v in labels) or labels != (worker, worker, count):
                return None
            found.append((worker, count, item))
        return found
    except (KeyError, TypeError, AttributeError):
        return None


def _check_loader_state(state: Any, intact: dict[str, Any]) -> tuple[str, int]:
    from mixle.errors import CorpusError

    dataset = _dataset()
    try:
        out = dataset.loader_state_for(state, num_workers=2)
    except CorpusError:
        return "clean", 0
    workers = _reference_workers(state)
    if workers is None:
        return "wrong: accepted a state whose workers do not add up", 1
    identity = intact["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]["stream"]
    positions = []
    for worker, count, item in workers:
        expected = {**identity, "worker": worker, "num_workers": count}
        if item["stream"] != expected or item["done"] not in (0, 1):
            return f"wrong: accepted worker {worker}'s state of another stream", 1
        if not item["done"]:
            positions.append((item["epoch"], item["batch"]))
    first = out["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    if positions and (first["epoch"], first["batch"]) != min(positions) and not first["done"]:
        return f"wrong: resumes at {(first['epoch'], first['batch'])}, not {min(positions)}", 1
    return "clean", 1


# -- driver ----------------------------------------------------------------------------
class StateFuzzer:
    """Seeds for one ``kind`` under ``base``; :meth:`once` tries one mutated input."""

    def __init__(self, kind: str, base: str) -> None:
        from mixle.corpus.storage.plan_cache import PlanFiles

        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; the kinds are {', '.join(KINDS)}")
        self.kind = kind
        self.base = base
        if kind.startswith("mixture"):
            self.seed = _mixture_seed(kind)
        elif kind.startswith("plan"):
            self.store = PlanFiles(os.path.join(base, "plans"))
            self.expected = _plan_rows(kind, None)
            _plan_rows(kind, self.store)  # writes the plan files
            directory = self.store.directory
            self.plans = {
                name: Path(directory, name).read_bytes() for name in sorted(os.listdir(directory))
            }
        else:
            self.state = _loader_seed()

    def once(self, rng: random.Random) -> tuple[str, int]:
        """Mutate, read under the per-input timeout; return ``(outcome, accepted)``."""
        check: Callable[[], tuple[str, int]]
        if self.kind.startswith("mixture"):
            if self.kind == "mixture.json" and rng.random() < 0.5:  # values, not bytes
                tree = mutate_state(json.loads(self.seed), rng)
                data = json.dumps(tree).encode()
            else:
                data = mutate(self.seed, rng)

            def check() -> tuple[str, int]:
                return _check_mixture_file(self.kind, data, self.base)
        elif self.kind.startswith("plan"):
            name = rng.choice(sorted(self.plans))
            path = Path(self.store.directory, name)
            path.write_bytes(mutate(self.plans[name], rng))

            def check() -> tuple[str, int]:
                from mixle.errors import CorpusError

                try:
                    try:
                        got = _plan_rows(self.kind, self.store)
                    except CorpusError:
                        return "clean", 0
                    if not _same(got, self.expected):
                        return f"wrong: a mutated {name} changed the batches", 1
                    # Accepted: the mutated file was loaded as it is (a change in padding),
                    # not rebuilt; the batches are the intact ones either way.
                    return "clean", int(path.read_bytes() != self.plans[name])
                finally:
                    for other, data in self.plans.items():  # restore every file
                        Path(self.store.directory, other).write_bytes(data)
        else:
            state = mutate_state(self.state, rng)

            def check() -> tuple[str, int]:
                return _check_loader_state(state, self.state)

        try:
            with deadline(PER_INPUT_SECONDS):
                return check()
        except Hang:
            return "hang", 0
        except Exception as exc:  # the very thing being counted
            return f"raw: {type(exc).__name__}: {str(exc)[:200]}", 0


def run(kind: str, count: int, seed: int) -> dict[str, Any]:
    """Fuzz ``kind`` with ``count`` mutated inputs; return the counts."""
    rng = random.Random(seed)
    counts: dict[str, Any] = {
        "kind": kind,
        "inputs": 0,
        "clean": 0,
        "raw": 0,
        "hangs": 0,
        "wrong": 0,
        "accepted": 0,
        "examples": [],
    }
    # On tmpfs where there is one: every rebuilt plan is fsynced, which costs on a disk.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="mixle-state-fuzz-", dir=shm)
    try:
        fuzzer = StateFuzzer(kind, base)
        for _ in range(count):
            outcome, accepted = fuzzer.once(rng)
            counts["inputs"] += 1
            counts["accepted"] += accepted
            key = {"clean": "clean", "hang": "hangs"}.get(outcome, outcome.split(":")[0])
            counts[key] += 1
            if key != "clean" and len(counts["examples"]) < 5:
                counts["examples"].append(outcome[:300])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return counts


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
