"""Device-mesh data-parallel place and context-parallel row slices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mixle.data import context_parallel_indices, context_parallel_slice, data_parallel_place
from mixle.errors import ArgumentError
from tests._torchrun import ROOT, run_torchrun


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


def test_tensor_parallel_peers_get_identical_batches(tmp_path: Path) -> None:
    folders = run_torchrun(ROOT / "tests" / "data" / "mesh_job.py", output=tmp_path, nproc=4)
    results = [json.loads((f / "out.json").read_text()) for f in folders]
    # mesh (2, 2) over ("dp", "tp"): global ranks 0,1 are dp 0; 2,3 are dp 1.
    assert [r["place"] for r in results] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert results[0]["batches"] == results[1]["batches"] != results[2]["batches"]
    assert results[2]["batches"] == results[3]["batches"]
