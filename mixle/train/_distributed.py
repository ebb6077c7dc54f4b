"""Process-group plumbing for data-parallel training under ``torchrun``.

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`setup_distributed` reads them, initialises a process group
(gloo on CPU, NCCL on CUDA) when ``WORLD_SIZE > 1`` and picks this rank's device
(``cuda:LOCAL_RANK`` when the run asks for ``cuda``). Without those variables — or with
``WORLD_SIZE=1`` — everything is a single process and every collective is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mixle.data.streaming_corpus import current_rank_and_world_size
from mixle.errors import ArgumentError

__all__ = ["DistributedContext", "setup_distributed"]


@dataclass
class DistributedContext:
    """This process's place in the job and the collectives the trainer needs."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the model, the metrics log, the plot and the console output."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (no-op in a single process)."""
        if self.world_size > 1:
            if self.device.type == "cuda":
                dist.barrier(device_ids=[self.device.index or 0])
            else:
                dist.barrier()

    def all_reduce_sum_(self, tensors: list[torch.Tensor]) -> None:
        """Sum ``tensors`` over ranks in place, as one flat buffer per dtype.

        Every rank receives the same bits: the reduction result is broadcast, so ranks
        that start identical stay identical.
        """
        if self.world_size == 1 or not tensors:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for tensor in tensors:
            by_dtype.setdefault(tensor.dtype, []).append(tensor)
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for tensor in group:
                size = tensor.numel()
                tensor.copy_(flat[offset : offset + size].view_as(tensor))
                offset += size

    def all_gather_int64(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (same length on every rank), indexed by rank."""
        if self.world_size == 1:
            return [list(values)]
        local = torch.tensor(values, dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local)
        return [t.cpu().tolist() for t in gathered]

    def all_gather_concat(self, array: torch.Tensor) -> torch.Tensor:
        """Every rank's ``array`` (same shape and dtype on every rank), concatenated
        along the first axis in rank order."""
        if self.world_size == 1:
            return array
        local = array.to(self.device).contiguous()
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local)
        return torch.cat(gathered).cpu()

    def close(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def _local_rank(rank: int) -> int:
    raw = os.environ.get("LOCAL_RANK")
    if raw is None or raw == "":
        return rank
    try:
        return int(raw)
    except ValueError:
        raise ArgumentError(
            f"environment variable LOCAL_RANK must be an integer. Got {raw!r} instead."
        ) from None


def setup_distributed(device: str) -> DistributedContext:
    """Join the torchrun job (if any) and resolve this rank's device.

    Parameters
    ----------
    device
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. With several ranks and ``"cuda"``, rank
        ``r`` uses ``cuda:LOCAL_RANK``.

    Raises
    ------
    ArgumentError
        Malformed torchrun variables, or CUDA requested but not available.
    """
    rank, world_size = current_rank_and_world_size()
    local_rank = _local_rank(rank)
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ArgumentError(f"`device` must name a torch device. Got {device!r} instead.") from exc
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ArgumentError(f"`device` is {device!r} but CUDA is not available here.")
        if resolved.index is None:
            resolved = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(resolved)
    owns = False
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if resolved.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
        owns = True
    return DistributedContext(rank, world_size, local_rank, resolved, owns)
