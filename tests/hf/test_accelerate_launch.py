"""Issue #19 item 4 under a real launch: two torchrun processes (gloo, CPU) run
``accelerate.Accelerator`` over one :class:`GlobalRowDataset` and each receives exactly
its rank's batches of the global layout, in all four accelerate modes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.hf.corpus import WORLD_SIZE, global_corpus
from tests.torchrun_launch import ROOT, launch_torchrun

pytest.importorskip("accelerate", reason="needs mixle[hf] (accelerate)")

FIELDS = ("context", "targets", "loss_mask", "document_ids", "position_ids")
MODES = [f"dispatch{d}-split{s}" for d in (1, 0) for s in (0, 1)]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("accelerate")
    launch_torchrun(
        ROOT / "tests" / "hf" / "accelerate_check.py", str(output), nproc=WORLD_SIZE, timeout=300
    )
    return output


@pytest.mark.parametrize("mode", MODES)
def test_each_process_gets_its_global_layout_batches(launched: Path, mode: str) -> None:
    seen: list[tuple[int, int]] = []
    for rank in range(WORLD_SIZE):
        expected = list(global_corpus(rank=rank).epoch_batches(0))
        with np.load(launched / f"{mode}-rank{rank}.npz") as got:
            assert int(got["steps"]) == len(expected) > 0
            for step, batch in enumerate(expected):
                for name, value in zip(FIELDS, batch, strict=True):
                    np.testing.assert_array_equal(got[f"{name}-{step}"], value, err_msg=name)
                mask = got[f"loss_mask-{step}"]
                pairs = zip(
                    got[f"document_ids-{step}"][mask],
                    got[f"position_ids-{step}"][mask],
                    strict=True,
                )
                seen.extend((int(d), int(p)) for d, p in pairs)
    # Every target of the epoch once: each input position of the packed stream, no repeats.
    lengths = [len(d) for d in global_corpus(rank=0).documents]
    stream = sum(lengths) + len(lengths) - 1  # documents plus a boundary between each two
    assert len(seen) == len(set(seen)) == stream - 1
