"""Device-mesh data-parallel place and context-parallel row slices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data import (
    Batch,
    StreamingCorpus,
    TokenStream,
    context_parallel_batch,
    context_parallel_indices,
    context_parallel_slice,
    data_parallel_place,
)
from mixle.errors import ArgumentError
from tests._torchrun import ROOT, run_torchrun
from tests.data.mesh_job import DOCUMENTS


@given(st.integers(1, 6), st.integers(1, 8), st.booleans())
def test_slices_put_back_together_give_the_row(cp_size: int, per: int, zigzag: bool) -> None:
    length = per * cp_size * (2 if zigzag else 1)
    row = np.arange(length) * 3
    mask = row % 2 == 0
    slices = [
        context_parallel_slice((row, mask), r, cp_size, zigzag=zigzag) for r in range(cp_size)
    ]
    if zigzag:
        half = length // (2 * cp_size)
        firsts = [s[0][:half] for s in slices]
        seconds = [s[0][half:] for s in slices][::-1]
        assert np.array_equal(np.concatenate(firsts + seconds), row)
    else:
        assert np.array_equal(np.concatenate([s[0] for s in slices]), row)
    for tokens, sliced_mask in slices:
        assert np.array_equal(sliced_mask, tokens % 2 == 0)  # mask stays aligned


def test_bad_degree_and_missing_dimension_are_named() -> None:
    with pytest.raises(ArgumentError, match="row length 6 must be a multiple of 4"):
        context_parallel_indices(6, 0, 2, zigzag=True)

    class Mesh:
        mesh_dim_names = ("dp", "tp")

    with pytest.raises(ArgumentError, match="no dimension 'cp'; its dimensions are"):
        data_parallel_place(Mesh(), ("dp", "cp"))


def _launched(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    folders = run_torchrun(ROOT / "tests" / "data" / "mesh_job.py", kind, output=tmp_path, nproc=4)
    return [json.loads((f / "out.json").read_text()) for f in folders]


def test_tensor_parallel_peers_get_identical_batches(tmp_path: Path) -> None:
    results = _launched(tmp_path, "tp")
    # mesh (2, 2) over ("dp", "tp"): global ranks 0,1 are dp 0; 2,3 are dp 1.
    assert [r["place"] for r in results] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert [r["for_current_rank"] for r in results] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    for name in ("corpus", "token_stream", "mixture", "after_save"):
        assert results[0][name] == results[1][name] != results[2][name] == results[3][name], name
    expected = [
        StreamingCorpus(DOCUMENTS, rank=r, world_size=2, block=4, batch_size=2, seed=1)
        for r in (0, 0, 1, 1)
    ]
    for corpus, result in zip(expected, results, strict=True):
        assert result["corpus"] == [corpus.read(0, k).context.tolist() for k in range(3)]
        # DCP: the batches after loading the checkpoint are those after saving it.
        assert (
            result["after_load"]
            == result["after_save"]
            == [*result["corpus"][2:], corpus.read(0, 3).context.tolist()]
        )
    for result in results:
        assert "the stream is built for rank" in result["global_rank_refused"]
        assert "mesh (dims ('dp',)) is rank" in result["global_rank_refused"]
        assert "seed" in result["other_stream"]
        assert (
            "dp_world_size in checkpoint: 4 / in job: 2 (mesh dims ('dp',))" in result["other_mesh"]
        )


def test_context_parallel_parts_put_back_give_every_batch_field(tmp_path: Path) -> None:
    results = _launched(tmp_path, "cp")
    # mesh (2, 2) over ("dp", "cp"): cp peers (0, 1) and (2, 3) share a batch.
    assert results[0]["batch"] == results[1]["batch"] != results[2]["batch"] == results[3]["batch"]
    for result in results:
        assert sorted(result["batch"]) == [
            "context",
            "document_ids",
            "loss_mask",
            "position_ids",
            "targets",
        ]
        for mode in ("zigzag0", "zigzag1"):
            assert result[mode]["reassembled"] == result["batch"], mode
    for rank, result in enumerate(results):
        cp_rank = rank % 2
        for zigzag in (False, True):
            index = context_parallel_indices(8, cp_rank, 2, zigzag=zigzag)
            mine = result[f"zigzag{int(zigzag)}"]["mine"]
            for name, full in result["batch"].items():
                assert mine[name] == np.asarray(full)[..., index].tolist(), name


def test_context_parallel_batch_keeps_per_row_fields() -> None:
    rows = np.arange(24).reshape(2, 12)
    batch = Batch(rows, rows + 1, rows % 5 != 0, rows // 4, rows % 4, np.array([3, 1]))
    part = context_parallel_batch(batch, 1, 3)
    assert part.context.tolist() == [[4, 5, 6, 7], [16, 17, 18, 19]]
    assert part.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert part.source_ids.tolist() == [3, 1]
    windows = Batch(rows, np.array([99, 98]))
    assert context_parallel_batch(windows, 0, 2, zigzag=True).targets.tolist() == [99, 98]
    with pytest.raises(ArgumentError, match=r"row length 12 must be a multiple of 8 \(2 × context"):
        context_parallel_batch(batch, 0, 4, zigzag=True)


def test_mesh_and_explicit_rank_together_are_refused() -> None:
    class Mesh:
        mesh_dim_names = ("dp",)

    with pytest.raises(ArgumentError, match=r"either `mesh`.*not both"):
        StreamingCorpus(DOCUMENTS, mesh=Mesh(), rank=0, world_size=1, block=4, batch_size=2)
    with pytest.raises(ArgumentError, match="no dimension 'dp_shard'"):
        TokenStream(DOCUMENTS, 4, 2, mesh=Mesh(), dp_dims=("dp_shard",))
    with pytest.raises(ArgumentError, match="needs `rank` and `world_size`, or `mesh`"):
        StreamingCorpus(DOCUMENTS, block=4, batch_size=2)
