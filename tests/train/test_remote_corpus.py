"""``mixle train`` on a corpus URL: the same run, bit for bit, as on the local copy.

The corpus is served by a range-capable ``http.server`` on 127.0.0.1 and read through
fsspec's HTTP filesystem into a shard cache in the test's temporary directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mixle.cli import main
from mixle.train import read_metrics
from tests.corpus._servers import CorpusHTTPServer


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    (checkpoint,) = sorted(run.glob("step-*"))[-1:]
    weights = dict(torch.load(checkpoint / "model.pt", weights_only=True)["model"])
    assert weights, "the checkpoint should hold the model's tensors"
    return weights


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(str(run / "metrics.jsonl")) if r["type"] == "step"]


def test_training_from_an_http_url_matches_training_from_the_local_directory(
    text_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIXLE_CACHE_DIR", str(tmp_path / "cache"))
    common = ["--d-model", "16", "--n-layer", "1", "--n-head", "2", "--block", "16"]
    common += ["--batch-size", "2", "--steps", "4", "--threads", "1", "--log-every", "0"]
    assert main(["train", str(text_corpus), *common, "--checkpoint-dir", str(tmp_path / "a")]) == 0
    with CorpusHTTPServer(str(text_corpus.parent)) as server:
        url = f"{server.url}/{text_corpus.name}"
        assert main(["train", url, *common, "--checkpoint-dir", str(tmp_path / "b")]) == 0
    assert any((tmp_path / "cache").rglob("*")), "shards should come through the cache"
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b")
    local, remote = _final_weights(tmp_path / "a"), _final_weights(tmp_path / "b")
    assert local.keys() == remote.keys()
    for name in local:
        assert torch.equal(local[name], remote[name]), name
