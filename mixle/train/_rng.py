"""Global RNG states (python, numpy, torch CPU and CUDA) as JSON-able dicts.

The trainer itself draws no random numbers per step (data order comes from the keyed
stream, the model has no dropout), but user hooks, samplers and future layers might;
saving and restoring every global generator makes a resumed process indistinguishable
from one that never stopped.
"""

from __future__ import annotations

import base64
import math
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
    data = bytearray(base64.b64decode(text, validate=True))  # binascii.Error: a ValueError
    if not data:
        raise ValueError("empty generator state")
    return torch.frombuffer(data, dtype=torch.uint8)


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


def set_rng_state(state: Any, where: str = "the checkpoint") -> None:
    """Restore what :func:`get_rng_state` returned, after checking every field.

    Nothing is restored unless the whole state is well formed: the generators'
    own setters would wrap an out-of-range key silently (python's ``random``), raise
    raw ``OverflowError`` (numpy) or crash the interpreter (numpy, for a position
    past its key array), so each value is checked against its range here first.

    Raises
    ------
    CheckpointError
        ``state`` is malformed; the message names ``where`` and the field
        (e.g. ``rng.numpy[2]``).
    """
    python, numpy_state, torch_state, cuda = _checked(state, where)
    try:
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        # Saved per device; restored only on a machine with as many devices.
        devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if cuda is not None and devices and len(cuda) == devices:
            torch.cuda.set_rng_state_all(cuda)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise CheckpointError(f"{where}: RNG state `rng` is malformed: {exc}") from exc


# Mersenne Twister: 624 32-bit words and a position 0..624 (python adds the position
# as a 625th word; numpy keeps it apart).
_MT_WORDS = 624
_WORD = 2**32


def _fail(where: str, field: str, expected: str, value: Any) -> CheckpointError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    return CheckpointError(f"{where}: RNG state `{field}` must be {expected}. Got {shown} instead.")


def _int_in(value: Any, low: int, high: int, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < high:
        raise _fail(where, field, f"an integer in [{low}, {high})", value)
    return value


def _words(value: Any, count: int, where: str, field: str) -> list[int]:
    if not isinstance(value, list) or len(value) != count:
        raise _fail(where, field, f"a list of {count} integers", value)
    for index, word in enumerate(value):
        if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word < _WORD:
            raise _fail(where, f"{field}[{index}]", f"an integer in [0, {_WORD})", word)
    return value


def _float_or_none(value: Any, where: str, field: str, *, none: bool) -> float | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(where, field, "a finite number" + (" or null" if none else ""), value)
    return float(value)


def _tensor(value: Any, where: str, field: str) -> torch.Tensor:
    if not isinstance(value, str):
        raise _fail(where, field, "a base64 string", value)
    try:
        return _text_to_tensor(value)
    except (ValueError, TypeError) as exc:
        raise _fail(where, field, "a base64 string", value[:20]) from exc


def _checked(state: Any, where: str) -> tuple[Any, Any, torch.Tensor, list[torch.Tensor] | None]:
    """The arguments of each generator's setter, from a checked ``state``."""
    if not isinstance(state, dict):
        raise _fail(where, "rng", "an object with python, numpy and torch states", state)
    python = state.get("python")
    if not isinstance(python, list) or len(python) != 3:
        raise _fail(where, "rng.python", "[version, 625 integers, gauss]", python)
    version = _int_in(python[0], 1, 4, where, "rng.python[0]")
    internal = python[1]
    if not isinstance(internal, list) or len(internal) != _MT_WORDS + 1:
        raise _fail(where, "rng.python[1]", f"a list of {_MT_WORDS + 1} integers", internal)
    _words(internal[:_MT_WORDS], _MT_WORDS, where, "rng.python[1]")
    _int_in(internal[_MT_WORDS], 0, _MT_WORDS + 1, where, f"rng.python[1][{_MT_WORDS}]")
    gauss = _float_or_none(python[2], where, "rng.python[2]", none=True)
    numpy_state = state.get("numpy")
    if not isinstance(numpy_state, list) or len(numpy_state) != 5:
        raise _fail(
            where, "rng.numpy", "[kind, 624 keys, position, has_gauss, cached]", numpy_state
        )
    kind, keys, position, has_gauss, cached = numpy_state
    if kind != "MT19937":
        raise _fail(where, "rng.numpy[0]", "'MT19937'", kind)
    keys = np.asarray(_words(keys, _MT_WORDS, where, "rng.numpy[1]"), dtype=np.uint32)
    position = _int_in(position, 0, _MT_WORDS + 1, where, "rng.numpy[2]")
    has_gauss = _int_in(has_gauss, 0, 2, where, "rng.numpy[3]")
    cached = _float_or_none(cached, where, "rng.numpy[4]", none=False)
    torch_state = _tensor(state.get("torch"), where, "rng.torch")
    expected = torch.get_rng_state().numel()
    if torch_state.numel() != expected:
        raise _fail(
            where, "rng.torch", f"a state of {expected} bytes", f"{torch_state.numel()} bytes"
        )
    cuda = state.get("cuda")
    if cuda is not None:
        if not isinstance(cuda, list):
            raise _fail(where, "rng.cuda", "a list of base64 strings", cuda)
        cuda = [_tensor(item, where, f"rng.cuda[{index}]") for index, item in enumerate(cuda)]
    return (
        (version, tuple(internal), gauss),
        (kind, keys, position, has_gauss, cached),
        torch_state,
        cuda,
    )
