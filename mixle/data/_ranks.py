"""This process's data-parallel place: ``(rank, world_size)`` from torch or torchrun."""

from __future__ import annotations

import os

from mixle.errors import ArgumentError

__all__ = ["current_rank_and_world_size"]


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ArgumentError(
            f"environment variable {name} must be an integer. Got {raw!r} instead."
        ) from None


def current_rank_and_world_size() -> tuple[int, int]:
    """``(rank, world_size)`` from an initialised ``torch.distributed``, else torchrun's env.

    Falls back to ``(0, 1)`` when neither is present.

    Raises
    ------
    ArgumentError
        Only one of ``RANK``/``WORLD_SIZE`` is set, or either is not an integer.
    """
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None and world_size is None:
        return 0, 1
    if rank is None or world_size is None:
        raise ArgumentError(
            "environment variables RANK and WORLD_SIZE must be set together (torchrun sets "
            f"both). Got RANK={os.environ.get('RANK')!r}, WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}."
        )
    return rank, world_size
