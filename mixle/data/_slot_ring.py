"""Shared-memory slots through which DataLoader workers hand batches to the main process.

A worker process owns one :class:`SlotRing`: :data:`SLOTS` equal slots in one anonymous
shared mapping (``memfd_create``). A batch is copied into a free slot and only a small
descriptor (ring token, slot, sequence number, layout) travels through the worker's
result pipe; the main process maps the ring once (its file descriptor is sent with the
first descriptor, through :mod:`multiprocessing`'s resource sharer, the way torch sends
tensors' descriptors) and copies the slot out. Nothing has a name in the file system,
so nothing can be left behind: the memory goes when both sides have unmapped it.

Each slot has an int64 state word in the ring's header: ``0`` free, ``n > 0`` holding the
batch of sequence number ``n``. Only the worker turns a slot from free to full (after
writing its bytes), only the main process turns it back (after copying them out), so
neither side ever blocks on the other: when no slot is free (the consumer has fallen
behind, or stopped reading), the worker falls back to sending the bytes through the pipe.
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
import weakref
from multiprocessing.reduction import DupFd
from typing import Protocol

import numpy as np

__all__ = [
    "MAX_RING_BYTES",
    "SLOTS",
    "FdHandle",
    "MappedRing",
    "SlotOwner",
    "SlotRing",
    "mapped_ring",
    "supports_shared_slots",
    "worker_ring",
]

#: Slots per worker: torch's DataLoader keeps at most ``prefetch_factor`` (2 by default)
#: items in flight per worker, plus the one being received; a group of batches lent to
#: the consumer (:meth:`MappedRing.lend`) holds its slot one step longer, and the
#: consumer may keep the previous step's batch: six leave one spare.
SLOTS = 6

#: No ring above this size (the batch goes through the pipe): the mapping is per worker.
MAX_RING_BYTES = 1 << 30

# Header: one int64 state word per slot, padded to a cache line; slots start aligned.
_HEADER = 64
_ALIGN = 64

# A ring's pages are faulted in once (by the first group written into each slot, and
# the first read of it in the main process) and stay: the mappings live as long as the
# worker, and memfd pages are not reclaimed without swap. Not MAP_POPULATE: that would
# zero every slot before the first batch (270 ms for a 100 MB ring on this loaded
# 2-core machine) instead of slot by slot as the first groups are written.
_FLAGS = mmap.MAP_SHARED


class FdHandle(Protocol):
    """A file descriptor in transit (``multiprocessing.reduction.DupFd``'s result)."""

    def detach(self) -> int:
        """The descriptor, duplicated into this process (once)."""
        ...


def supports_shared_slots() -> bool:
    """Whether this platform can make anonymous shared mappings (Linux ``memfd``)."""
    return hasattr(os, "memfd_create")


class SlotRing:
    """A worker process's ring of :data:`SLOTS` slots of ``slot_bytes`` each.

    Not thread-safe on the filling side (one generator fills it); :meth:`handle` may be
    called from the queue's feeder thread.
    """

    def __init__(self, slot_bytes: int) -> None:
        self.slot_bytes = -(-slot_bytes // _ALIGN) * _ALIGN
        self.size = _HEADER + SLOTS * self.slot_bytes
        self.pid = os.getpid()
        #: Names the ring in the main process's registry (pids are reused, tokens not).
        self.token = secrets.token_hex(8)
        self._fd = os.memfd_create("mixle-batches", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self._fd, self.size)
            self._map = mmap.mmap(self._fd, self.size, flags=_FLAGS)
        except OSError:
            os.close(self._fd)
            raise
        self.states = np.frombuffer(self._map, dtype=np.int64, count=SLOTS)
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)
        self._sequence = 0
        self._next = 0
        self._handle_sent = False
        self._lock = threading.Lock()

    def acquire(self, nbytes: int) -> tuple[int, int, np.ndarray] | None:
        """A free slot for ``nbytes``: ``(slot, sequence, view)``, or ``None`` if none is free.

        The slot stays free until :meth:`publish`: write the bytes into ``view`` first.
        """
        if nbytes > self.slot_bytes:
            return None
        for step in range(SLOTS):
            slot = (self._next + step) % SLOTS
            if self.states[slot] == 0:
                self._next = slot + 1
                self._sequence += 1
                start = _HEADER + slot * self.slot_bytes
                return slot, self._sequence, self._bytes[start : start + nbytes]
        return None

    def publish(self, slot: int, sequence: int) -> None:
        """Mark ``slot`` full with the batch of ``sequence`` (its bytes are written)."""
        self.states[slot] = sequence

    def release(self, slot: int) -> None:
        """Mark ``slot`` free again (the worker consumed its batch itself)."""
        self.states[slot] = 0

    def handle(self) -> FdHandle | None:
        """The ring's file descriptor for the main process, the first time only."""
        with self._lock:
            if self._handle_sent:
                return None
            self._handle_sent = True
            handle: FdHandle = DupFd(self._fd)
            return handle


class SlotOwner:
    """Something a worker sends that may own a full slot of its ring (a batch, a group):
    the slot is freed if it is dropped in the worker, and handed over (to the receiver,
    who frees it) when it is pickled."""

    __slots__ = ("_ring_slot",)

    def __init__(self, ring_slot: tuple[SlotRing, int, int] | None) -> None:
        #: ``(ring, slot, sequence)`` while this object owns a full slot.
        self._ring_slot = ring_slot

    @property
    def shared(self) -> bool:
        """Whether the bytes are in a shared slot (and pickle as its place only)."""
        return self._ring_slot is not None

    def _free(self) -> None:
        if self._ring_slot is not None:
            ring, slot, _ = self._ring_slot
            self._ring_slot = None
            ring.release(slot)

    def _hand_over(self) -> tuple[str, int, FdHandle | None, int, int]:
        """The slot's place for the receiver, who frees the slot from then on."""
        assert self._ring_slot is not None
        ring, slot, sequence = self._ring_slot
        self._ring_slot = None
        return ring.token, ring.pid, ring.handle(), slot, sequence

    def __del__(self) -> None:
        # Dropped in the worker, never sent (or unpacked there by a collate_fn that built
        # something else): its slot is free again.
        self._free()


_worker_ring: SlotRing | None = None


def worker_ring(nbytes: int) -> SlotRing | None:
    """This process's ring, made for the first batch of ``nbytes``; ``None`` if it cannot
    hold such a batch (unsupported platform, a larger batch than the first, too large)."""
    global _worker_ring
    ring = _worker_ring
    if ring is None or ring.pid != os.getpid():  # none yet, or inherited through fork
        if not supports_shared_slots() or SLOTS * nbytes > MAX_RING_BYTES:
            return None
        ring = _worker_ring = SlotRing(nbytes)
    return ring if nbytes <= ring.slot_bytes else None


class MappedRing:
    """The main process's mapping of a worker's ring (from the file descriptor it sent)."""

    def __init__(self, fd: int, pid: int) -> None:
        self.pid = pid
        try:
            self._map = mmap.mmap(fd, 0, flags=_FLAGS)
        finally:
            os.close(fd)
        self.states = np.frombuffer(self._map, dtype=np.int64, count=SLOTS)
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)
        self.slot_bytes = (len(self._map) - _HEADER) // SLOTS

    def take(self, slot: int, sequence: int, nbytes: int) -> np.ndarray:
        """A private copy of the batch ``sequence`` in ``slot``; frees the slot.

        Raises
        ------
        RuntimeError
            The slot does not hold that batch (a broken hand-over, never expected).
        """
        state = int(self.states[slot])
        if state != sequence or not 0 <= slot < SLOTS or nbytes > self.slot_bytes:
            raise RuntimeError(
                f"DataLoader worker {self.pid}: shared slot {slot} holds batch {state}, "
                f"expected batch {sequence} of {nbytes} bytes."
            )
        start = _HEADER + slot * self.slot_bytes
        out = np.empty(nbytes, dtype=np.uint8)
        out[...] = self._bytes[start : start + nbytes]
        self.states[slot] = 0
        return out

    def lend(self, slot: int, sequence: int, nbytes: int) -> np.ndarray:
        """The batch ``sequence`` in ``slot`` *in place*: the slot is freed when the
        returned array and every view of it are gone (no copy).

        Every view keeps alive the ``memoryview`` numpy holds as the array's base (a
        fresh one per call, whether numpy collapses views of views to the array or to
        it); that memoryview's finaliser frees the slot, from whichever thread drops the
        last view. The worker writes only into free slots, so the bytes stay put.

        Raises
        ------
        RuntimeError
            As for :meth:`take`.
        """
        state = int(self.states[slot])
        if state != sequence or not 0 <= slot < SLOTS or nbytes > self.slot_bytes:
            raise RuntimeError(
                f"DataLoader worker {self.pid}: shared slot {slot} holds batch {state}, "
                f"expected batch {sequence} of {nbytes} bytes."
            )
        start = _HEADER + slot * self.slot_bytes
        lent = np.frombuffer(memoryview(self._map)[start : start + nbytes], dtype=np.uint8)
        weakref.finalize(lent.base, _free_slot, self.states, slot, sequence)
        return lent


def _free_slot(states: np.ndarray, slot: int, sequence: int) -> None:
    """Free ``slot`` if it still holds batch ``sequence`` (the last view of it is gone)."""
    if states[slot] == sequence:
        states[slot] = 0


_mapped: dict[str, MappedRing] = {}
_mapped_lock = threading.Lock()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mapped_ring(token: str, pid: int, handle: FdHandle | None) -> MappedRing:
    """The main process's mapping of ring ``token`` of worker ``pid``.

    The first descriptor of a ring carries ``handle``; mapping a new ring drops the
    mappings of workers that have exited (each DataLoader iterator starts new workers).

    Raises
    ------
    RuntimeError
        ``token`` is unknown here and no ``handle`` came with it.
    """
    with _mapped_lock:
        ring = _mapped.get(token)
        if ring is not None:
            return ring
        if handle is None:
            raise RuntimeError(
                f"DataLoader worker {pid}: a batch names shared ring {token}, which this "
                "process has not mapped (its first batch went to another process)."
            )
        for gone in [key for key, other in _mapped.items() if not _alive(other.pid)]:
            del _mapped[gone]
        ring = _mapped[token] = MappedRing(handle.detach(), pid)
        return ring
