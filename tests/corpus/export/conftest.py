"""Helpers for the export tests: small real corpora (``make_corpus`` comes from
``tests/corpus/conftest.py``) and the real peer readers."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

_MEGATRON_HINT = "install the interop extra: pip install -e '.[interop]'"
# litdata requires torchvision, whose wheels do not load with the CPU torch: .ci/run
# installs it without dependencies.
_LITDATA_HINT = "pip install -e '.[interop]' && pip install --no-deps 'litdata>=0.2.76'"


def documents(seed: int, count: int, max_len: int = 300, vocab: int = 50_000) -> list[np.ndarray]:
    """Deterministic documents of random lengths (some empty) and ids below ``vocab``."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, max_len, size=count)
    lengths[rng.integers(0, count, size=max(count // 20, 1))] = 0
    return [rng.integers(0, vocab, size=int(n), dtype=np.int64) for n in lengths]


def megatron() -> Any:
    """``megatron.core.datasets`` (imported quietly: it warns that Apex is absent), or skip."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import megatron.core.datasets.blended_megatron_dataset_builder
            import megatron.core.datasets.gpt_dataset
            import megatron.core.datasets.indexed_dataset
            import megatron.core.tokenizers.text.libraries.null_tokenizer
        except ImportError as exc:
            pytest.skip(f"megatron-core is not importable ({exc}); {_MEGATRON_HINT}")
    return megatron.core


def litdata() -> Any:
    """The ``litdata`` package, or skip with the install hint."""
    try:
        import litdata as module
        import litdata.streaming.item_loader
    except ImportError as exc:
        pytest.skip(f"litdata is not importable ({exc}); {_LITDATA_HINT}")
    return module
