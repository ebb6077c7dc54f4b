"""``mixle show``/``mixle where`` of the per-rank layout in phases (issue #27, item 1), on
three ranks: every step's rebuilt batch of every rank is the batch that rank's stream
hands out at that step, and every sighting of a document lies in the rows its step
shows. (A trained run's digests against its ``metrics.jsonl``: world size 1 in
tests/provenance/test_show_curricula.py, two torchrun ranks in
tests/train/test_block_schedule_per_rank_train.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mixle.corpus import open_corpus
from mixle.data import BlockSchedule, StreamingCorpus
from mixle.provenance import RunSpec, resolve_run, show_step, where
from mixle.train import DataConfig
from tests.provenance._helpers import write_jsonl_corpus

WORLD = 3
SCHEDULE = "16:960,32:1920,64"  # K = 3 x 4 x 16 = 192 tokens: steps 1-5, 6-10, then 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl_corpus(tmp_path_factory.mktemp("show-per-rank"), (20, 14))


def _spec(corpus: Path) -> RunSpec:
    data = DataConfig(
        corpus=str(corpus), layout="per-rank", block=16, batch_size=4, block_schedule=SCHEDULE
    )
    return resolve_run(str(corpus), data=data, world_size=WORLD)


def _streams(corpus: Path) -> list[StreamingCorpus]:
    documents = open_corpus(str(corpus))
    return [
        StreamingCorpus(
            documents,
            rank=rank,
            world_size=WORLD,
            block=16,
            batch_size=4,
            document_ids=True,
            block_schedule=BlockSchedule.parse(SCHEDULE),
        )
        for rank in range(WORLD)
    ]


def test_every_step_of_every_rank_is_rebuilt_as_the_stream_hands_it_out(corpus: Path) -> None:
    spec = _spec(corpus)
    iterators = [stream.batches() for stream in _streams(corpus)]
    steps = sum(s.num_batches(e) for s in _streams(corpus)[:1] for e in range(2))
    blocks = set()
    for step in range(1, steps + 1):
        for rank, batches in enumerate(iterators):
            expected = next(batches)
            shown = spec.batch(step, rank)
            blocks.add(expected.block)
            for got, want in zip(shown.as_tuple(), expected.as_tuple(), strict=True):
                np.testing.assert_array_equal(got, want)
    assert blocks == {16, 32, 64}


def test_every_sighting_lies_in_the_rows_its_step_shows(corpus: Path) -> None:
    spec = _spec(corpus)
    for document in (0, 7, 21):
        report = where(spec, document, epochs=2)
        sightings = report.documents[0].sightings
        assert sightings and {s.rank for s in sightings} <= set(range(WORLD))
        for sighting in sightings:
            rows = show_step(spec, sighting.step).ranks[sighting.rank].rows
            held = [s for s in rows[sighting.row].documents if s.document == document]
            assert held, (document, sighting)
