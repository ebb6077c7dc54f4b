"""``TokenStreamDataset`` refuses every cursor ``TokenStream`` refuses (issue #18)."""

from __future__ import annotations

import numpy as np
import pytest

from mixle.data.stream_token_source import TokenStream
from mixle.data.torch import TokenStreamDataset
from mixle.errors import StateMismatchError

DOCS = [np.arange(n, dtype=np.int64) for n in (30, 17, 41, 8)]


def _stream() -> TokenStream:
    return TokenStream(DOCS, 6, 5, epochs=2, seed=4, boundary_id=-1)


@pytest.mark.parametrize(("epoch", "batch"), [(2, 0), (2, 1), (7, 0), (0, 10_000)])
def test_cursor_past_the_stream_is_refused_like_token_stream(epoch: int, batch: int) -> None:
    stream = _stream()
    dataset = TokenStreamDataset(stream)
    state = {**dataset.state_dict(), "epoch": epoch, "batch": batch, "done": 0}
    before = dataset.state_dict()
    with pytest.raises(StateMismatchError):
        dataset.load_state_dict(state)
    assert dataset.state_dict() == before  # nothing changed
    stream_state = {**stream.state_dict(), "epoch": epoch, "position": batch * stream.batch_size}
    if (epoch, batch) != (2, 0):  # TokenStream accepts (epochs, 0) as "finished"
        with pytest.raises(StateMismatchError):
            _stream().load_state_dict(stream_state)


def test_every_cursor_the_dataset_emits_loads_back() -> None:
    dataset = TokenStreamDataset(_stream())
    for _ in dataset:
        state = dataset.state_dict()
        TokenStreamDataset(_stream()).load_state_dict(state)
