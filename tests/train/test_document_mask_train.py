"""``mixle train --packing best_fit --document-mask``: masked attention reaches the model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mixle.cli import main
from mixle.corpus import open_corpus
from mixle.errors import ArgumentError
from mixle.models import CausalTransformerLM
from mixle.models._accumulator import model_logits
from mixle.models._inputs import parse_batch
from mixle.train import TrainConfig
from mixle.train._mixture import MixtureBatches, open_mixture
from mixle.train._sources import make_source
from tests.train._helpers import write_mixture


def test_best_fit_rows_keep_their_sequence_ids_into_the_model(text_corpus: Path) -> None:
    documents = open_corpus(text_corpus)
    source = make_source(
        "packed",
        documents,
        rank=0,
        world_size=1,
        block=256,
        batch_size=4,
        seed=0,
        boundary_id=None,
        layout="global",
        packing="best_fit",
        document_mask=True,
    )
    batch = source.corpus.read(0, 0)
    parsed = parse_batch(batch, 256, 256)
    assert parsed.sequence_ids is not None
    assert np.array_equal(parsed.sequence_ids, batch.sequence_ids)
    model = CausalTransformerLM(256, d_model=16, n_layer=1, n_head=2, block=256)
    ids = torch.from_numpy(parsed.contexts)
    with torch.no_grad():
        masked = model_logits(model, ids, False, torch.from_numpy(parsed.sequence_ids))
        plain = model_logits(model, ids, False)
    # Rows holding more than one document see different logits once attention is masked.
    several = (batch.sequence_ids.max(axis=1) > 0).nonzero()[0]
    assert several.size and not torch.allclose(masked[several], plain[several])


def test_cli_trains_and_resumes_with_best_fit_and_document_mask(
    text_corpus: Path, tmp_path: Path
) -> None:
    run = str(tmp_path / "run")
    base = ["train", str(text_corpus), "--d-model", "16", "--n-layer", "1", "--n-head", "2"]
    base += ["--block", "64", "--batch-size", "2", "--threads", "1", "--log-every", "0"]
    base += ["--packing", "best_fit", "--document-mask", "--checkpoint-dir", run]
    assert main([*base, "--steps", "3"]) == 0
    assert main([*base, "--steps", "5", "--resume"]) == 0
    # The packing is part of the run's identity: concatenate does not resume it.
    plain = [arg for arg in base if arg not in ("best_fit", "--document-mask")]
    plain.remove("--packing")
    assert main([*plain, "--steps", "6", "--resume"]) == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"packing": "best_fit", "layout": "per-rank"}, "layout='per-rank' (needs 'global')"),
        ({"document_mask": True, "objective": "windows"}, "objective='windows'"),
        ({"packing": "first_fit"}, "`packing` must be one of"),
    ],
)
def test_bad_packing_settings_are_refused_by_name(
    text_corpus: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ArgumentError, match=re.escape(message)):
        TrainConfig(corpus=str(text_corpus), **changes)  # type: ignore[arg-type]


def test_cli_trains_a_mixture_with_best_fit_and_document_mask(tmp_path: Path) -> None:
    mix = write_mixture(tmp_path, documents=(24, 6), seed=3)
    run = str(tmp_path / "run")
    base = ["train", "--mixture", str(mix), "--d-model", "16"]
    base += ["--n-layer", "1", "--n-head", "2", "--block", "64", "--batch-size", "2"]
    base += ["--threads", "1", "--log-every", "0", "--checkpoint-dir", run]
    best_fit = [*base, "--packing", "best_fit", "--document-mask"]
    assert main([*best_fit, "--steps", "3"]) == 0
    assert main([*best_fit, "--steps", "5", "--resume"]) == 0
    # The mixture's state names its packing: concatenate does not resume it.
    assert main([*base, "--steps", "6", "--resume"]) == 2


def test_mixture_batches_carry_sequence_ids_into_the_model(tmp_path: Path) -> None:
    mix = write_mixture(tmp_path, documents=(24, 6), seed=4)
    mixture, _ = open_mixture(
        str(mix), block=64, batch_size=4, packing="best_fit", attention_boundaries=True
    )
    batch, _ = next(iter(MixtureBatches(mixture)))
    parsed = parse_batch(batch, 256, 64)
    assert parsed.sequence_ids is not None
    assert np.array_equal(parsed.sequence_ids, batch.sequence_ids)
