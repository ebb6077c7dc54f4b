"""Process-wide settings a training run holds for its duration: determinism, signals.

Both are context managers that restore what they changed, so calling
:func:`mixle.train.train` from a larger program leaves torch and the signal handlers as
they were.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["StopFlag", "deterministic", "stop_on_signals"]


@contextmanager
def deterministic(device: torch.device, threads: int | None) -> Iterator[None]:
    """Deterministic algorithms on (warn-only on CUDA) and ``threads`` torch threads."""
    previous = torch.are_deterministic_algorithms_enabled()
    previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    # CUDA kernels without a deterministic variant warn rather than abort a long run.
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        torch.set_num_threads(previous_threads)


class StopFlag:
    """Set by SIGTERM/SIGINT: finish the current step, checkpoint, stop."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signal = signum


@contextmanager
def stop_on_signals(enabled: bool) -> Iterator[StopFlag]:
    """Route SIGTERM/SIGINT to a :class:`StopFlag` while enabled (main thread only)."""
    flag = StopFlag()
    if not enabled:
        yield flag
        return
    previous = {s: signal.signal(s, flag) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
