"""Mixture sources keep their epoch layouts in a plan store: loaded on restart, rebuilt
when missing or broken, and the batches never change."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import Mixture, MixtureSource
from mixle.data._mixture_source import _tokens_digest
from mixle.data._plan_store import PLAN_FORMAT
from mixle.errors import ArgumentTypeError, CorpusFormatError
from tests.corpus.conftest import random_documents
from tests.corpus.storage.test_plan_cache import _corruptions

ROOT = Path(__file__).resolve().parents[3]
BLOCK = 6
WEIGHTS = {"web": 0.6, "code": 0.3, "math": 0.1}


@pytest.fixture
def corpora(make_corpus: Callable[..., Path]) -> dict[str, Path]:
    return {
        name: make_corpus(random_documents(seed, count, max_len=30), vocab_size=1000)
        for seed, (name, count) in enumerate((("web", 60), ("code", 15), ("math", 5)))
    }


def _mixture(corpora: dict[str, Path], store: PlanFiles | None, **options: Any) -> Mixture:
    # The permutation order: the blocks order's plans are never stored (O(N / B)).
    base: dict[str, Any] = {
        "block": BLOCK, "batch_size": 3, "boundary_id": 999, "seed": 4, "order": "permutation"
    }  # fmt: skip
    base.update(options)
    sources = [MixtureSource(open_corpus(p), WEIGHTS[n], n) for n, p in corpora.items()]
    return Mixture(sources, plan_store=store, **base)


def _rows(mixture: Mixture, begin: int = 0, end: int = 400) -> list[np.ndarray]:
    """Enough rows that every source runs through several epochs."""
    return [np.array(a) for a in mixture.rows_at(begin, end)]


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _layout_identity(mixture: Mixture, source: int, epoch: int) -> dict[str, Any]:
    rows = mixture.rows[source]
    return {
        "mixture_source": rows.name,
        "fingerprint": rows.fingerprint,
        "num_documents": rows.num_documents,
        "seed": rows.seed,
        "block": rows.block,
        "boundary_id": rows.boundary_id,
        "plan_format": PLAN_FORMAT,
        "epoch": epoch,
    }


def test_a_restarted_mixture_loads_its_plans_and_reads_no_lengths(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    expected = _rows(_mixture(corpora, None, document_ids=True))
    _assert_same(_rows(_mixture(corpora, store, document_ids=True)), expected)
    # One token count per source and one layout per source and epoch read.
    files = sorted(p.name for p in (tmp_path / "plans").iterdir())
    assert len(files) > 2 * len(corpora)
    restarted = _mixture(corpora, store, document_ids=True)
    _assert_same(_rows(restarted), expected)
    assert all(rows._lengths_array is None for rows in restarted.rows)  # nothing planned
    assert sorted(p.name for p in (tmp_path / "plans").iterdir()) == files
    loaded = restarted.rows[0].layout(0)
    assert isinstance(loaded.starts.base, memoryview | np.ndarray)  # a view of the file
    assert not loaded.starts.flags.writeable


def test_a_resumed_mixture_gives_the_uninterrupted_batches(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    whole = _mixture(corpora, store, world_size=2, rank=1)
    batches = [tuple(np.array(a) for a in b) for b, _ in zip(whole, range(40), strict=False)]
    for stop in (0, 7, 23, 39):
        head = _mixture(corpora, store, world_size=2, rank=1)
        for _ in zip(range(stop), head, strict=False):  # range first: no extra batch
            pass
        resumed = _mixture(corpora, store, world_size=2, rank=1)
        resumed.load_state_dict(json.loads(json.dumps(head.state_dict())))
        for expected, got in zip(batches[stop:], resumed, strict=False):
            _assert_same(list(expected), list(got))


@pytest.mark.parametrize("corrupt", _corruptions(), ids=lambda f: f.__name__)
def test_a_corrupt_mixture_plan_is_rebuilt_and_replaced(
    corpora: dict[str, Path], tmp_path: Path, corrupt: Callable[[bytes], bytes]
) -> None:
    store = PlanFiles(tmp_path / "plans")
    expected = _rows(_mixture(corpora, None))
    _rows(_mixture(corpora, store))
    originals = {p: p.read_bytes() for p in (tmp_path / "plans").iterdir()}
    for path, data in originals.items():  # every layout and every token count
        path.write_bytes(corrupt(data))
    _assert_same(_rows(_mixture(corpora, store)), expected)
    assert {p: p.read_bytes() for p in (tmp_path / "plans").iterdir()} == originals


def test_missing_mixture_plans_are_rebuilt(corpora: dict[str, Path], tmp_path: Path) -> None:
    store = PlanFiles(tmp_path / "plans")
    expected = _rows(_mixture(corpora, None))
    _rows(_mixture(corpora, store))
    originals = {p: p.read_bytes() for p in (tmp_path / "plans").iterdir()}
    for path in list(originals)[::2]:
        path.unlink()
    _assert_same(_rows(_mixture(corpora, store)), expected)
    assert {p: p.read_bytes() for p in (tmp_path / "plans").iterdir()} == originals


def test_a_layout_that_disagrees_with_the_source_is_rebuilt(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    expected = _rows(_mixture(corpora, None))
    mixture = _mixture(corpora, store)
    _rows(mixture)
    identity = _layout_identity(mixture, 0, 0)
    arrays = {name: np.array(a) for name, a in (store.load(identity) or {}).items()}
    arrays["indices"] = arrays["indices"][::-1].copy()  # another order, same lengths file
    store.save(identity, arrays)
    _assert_same(_rows(_mixture(corpora, store)), expected)
    saved = store.load(identity)
    assert saved is not None and np.array_equal(saved["indices"], arrays["indices"][::-1])


def test_a_forged_token_count_is_corrected_and_named(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    store = PlanFiles(tmp_path / "plans")
    mixture = _mixture(corpora, store)
    rows = mixture.rows[0]
    identity = rows._identity(plan="tokens")
    true_tokens = int(store.load(identity)["tokens"][0])  # type: ignore[index]
    forged = true_tokens + 50  # a self-consistent record of the wrong count
    store.save(identity, {"tokens": np.array([forged, _tokens_digest(forged)], dtype=np.int64)})
    for path in (tmp_path / "plans").iterdir():
        if path != Path(store.path_for(identity)):
            path.unlink()  # no layout to load: the next read plans from the lengths
    with pytest.raises(CorpusFormatError, match="token count for source 'web'"):
        _rows(_mixture(corpora, store))
    assert int(store.load(identity)["tokens"][0]) == true_tokens  # type: ignore[index]
    _assert_same(_rows(_mixture(corpora, store)), _rows(_mixture(corpora, None)))


def test_a_bad_plan_store_is_rejected(corpora: dict[str, Path]) -> None:
    with pytest.raises(ArgumentTypeError, match="plan_store"):
        _mixture(corpora, object())  # type: ignore[arg-type]


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import Mixture, MixtureSource
paths, weights, state = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
sources = [MixtureSource(open_corpus(p), weights[n], n) for n, p in paths.items()]
options = {{"order": "permutation", **json.loads(sys.argv[4])}}
mixture = Mixture(sources, plan_store=PlanFiles({plans!r}), **options)
mixture.load_state_dict(state)
batches = [[a.tolist() for a in batch] for batch, _ in zip(mixture, range(5))]
print(json.dumps({{"batches": batches, "planned": [r._lengths_array is not None for r in mixture.rows]}}))
"""


def test_a_fresh_process_resumes_a_mixture_from_its_plans(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    plans = tmp_path / "plans"
    options = {"block": BLOCK, "batch_size": 2, "boundary_id": 999, "seed": 4, "world_size": 3}
    reference = _mixture(corpora, PlanFiles(plans), **options)
    expected = [tuple(np.array(a) for a in b) for b, _ in zip(reference, range(60), strict=False)]
    child = _CHILD.format(root=str(ROOT), plans=str(plans))
    for position in (0, 31, 55):
        head = _mixture(corpora, None, **options)
        head.seek(position * head.global_batch_size)
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                child,
                json.dumps({n: str(p) for n, p in corpora.items()}),
                json.dumps(WEIGHTS),
                json.dumps(head.state_dict()),
                json.dumps(options),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        output = json.loads(result.stdout)
        assert output["planned"] == [False, False, False]
        for want, got in zip(expected[position : position + 5], output["batches"], strict=True):
            _assert_same(list(want), [np.array(a) for a in got])


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 99), max_size=10), min_size=1, max_size=12),
    st.lists(st.lists(st.integers(0, 99), max_size=10), min_size=1, max_size=5),
    st.integers(1, 5),
    st.sampled_from([None, 100]),
    st.floats(0.01, 0.99),
    st.integers(0, 200),
)
def test_cached_and_fresh_mixtures_give_identical_batches_and_states(
    tmp_path_factory: pytest.TempPathFactory,
    first: list[list[int]],
    second: list[list[int]],
    block: int,
    boundary: int | None,
    weight: float,
    start: int,
) -> None:
    docs = [[np.array(d, dtype=np.int64) for d in group] for group in (first, second)]
    # Each source needs at least one target.
    docs = [[*group, np.arange(2, dtype=np.int64)] for group in docs]
    store = PlanFiles(tmp_path_factory.mktemp("plans"))
    options: dict[str, Any] = {
        "block": block, "batch_size": 2, "boundary_id": boundary, "order": "permutation"
    }  # fmt: skip

    def build(plan_store: PlanFiles | None) -> Mixture:
        sources = [MixtureSource(docs[0], weight, "a"), MixtureSource(docs[1], 1 - weight, "b")]
        return Mixture(sources, plan_store=plan_store, document_ids=True, **options)

    fresh, writer, reader = build(None), build(store), build(store)
    expected = [np.array(a) for a in fresh.rows_at(start, start + 60)]
    _assert_same([np.array(a) for a in writer.rows_at(start, start + 60)], expected)
    _assert_same([np.array(a) for a in reader.rows_at(start, start + 60)], expected)
    assert reader.state_dict() == fresh.state_dict()
