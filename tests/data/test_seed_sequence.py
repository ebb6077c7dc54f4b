"""The Feistel round keys without numpy.random: numpy's SeedSequence, bit for bit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mixle.corpus import CorpusWriter
from mixle.data._seed_sequence import seed_sequence_state

_WORDS = st.one_of(
    st.integers(0, 3), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**90)
)


@settings(max_examples=100, deadline=None)
@given(entropy=st.lists(_WORDS, max_size=9), count=st.integers(0, 9))
def test_seed_sequence_state_is_numpys(entropy: list[int], count: int) -> None:
    expected = np.random.SeedSequence(entropy).generate_state(count, dtype=np.uint64)
    assert seed_sequence_state(entropy, count) == expected.tolist()


def test_a_blocks_order_first_batch_does_not_import_numpy_random(tmp_path: Path) -> None:
    lengths = np.arange(20_000) % 7 + 1
    with CorpusWriter(tmp_path / "c", vocab_size=100, durable=False) as writer:
        writer.add_flat(np.ones(int(lengths.sum()), dtype=np.int64), lengths)
    script = (
        "import sys\n"
        "from mixle.corpus import open_corpus\n"
        "from mixle.data import StreamingCorpus\n"
        f"documents = open_corpus({str(tmp_path / 'c')!r})\n"
        "stream = StreamingCorpus(documents, layout='global', block=64, batch_size=2, rank=0, world_size=1, block_documents=1024)\n"
        "next(iter(stream))\n"
        "print('numpy.random' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
