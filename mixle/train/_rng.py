"""Global RNG states (python, numpy, torch CPU and CUDA) as JSON-able dicts.

The trainer itself draws no random numbers per step (data order comes from the keyed
stream, the model has no dropout), but user hooks, samplers and future layers might;
saving and restoring every global generator makes a resumed process indistinguishable
from one that never stopped.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import numpy as np
import torch

from mixle.errors import CheckpointError

__all__ = ["get_rng_state", "seed_everything", "set_rng_state"]


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global generator and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _bytes_to_text(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _text_to_tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def get_rng_state() -> dict[str, Any]:
    """Every global generator's state; JSON-serialisable."""
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, np.asarray(keys).tolist(), int(position), int(has_gauss), float(cached)],
        "torch": _bytes_to_text(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_bytes_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Any) -> None:
    """Restore what :func:`get_rng_state` returned.

    Raises
    ------
    CheckpointError
        ``state`` is malformed.
    """
    try:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
        kind, keys, position, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
        torch.set_rng_state(_text_to_tensor(state["torch"]))
        if "cuda" in state and torch.cuda.is_available():
            saved = [_text_to_tensor(s) for s in state["cuda"]]
            if len(saved) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(saved)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"RNG state in the checkpoint is malformed: {exc}") from exc
