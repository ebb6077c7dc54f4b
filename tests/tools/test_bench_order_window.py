"""``tools/bench_order_window.py`` (issue #25 item 1: the window size's cost), in-process.

Figures are measurements, not asserted: each packing's measurement streams the
requested batches over a virtual corpus (whose ``lengths`` refuse: the blocks order
must not ask for them) and reports its window and positive figures.
"""

from __future__ import annotations

import pytest

from tools.bench_order_window import measure


@pytest.mark.parametrize("packing", ["concatenate", "best_fit"])
def test_a_measurement_streams_the_blocks_order_of_a_virtual_corpus(packing: str) -> None:
    figures = measure(20_000, 32, 40, 64, 3, packing)
    assert figures["packing"] == packing
    assert figures["window_blocks"] == 3 and figures["window_documents"] == 192
    for key in ("first_batch_wall_ms", "first_batch_cpu_ms", "rss_anon_mb"):
        assert isinstance(figures[key], float) and figures[key] > 0, key
