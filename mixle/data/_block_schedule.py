"""Context length per phase: a :class:`BlockSchedule` of ``(until, block, batch_size)`` phases.

A schedule cuts a run's token stream into phases, each with its own ``block`` (tokens
per row input) and rows per rank, e.g. 2048-token rows for the first 90% of the tokens,
then 8192-token rows (``BlockSchedule.parse("2048:0.9,8192")``). The tokens per global
batch stay constant, ``K = world_size x batch_size x block`` of the first phase, so a
phase of block ``b`` takes ``K / b`` rows per global batch (``16 x 2048`` then ``4 x
8192``).

Where the phases switch is counted in *tokens* of the run: the targets the stream's
global batches cover from the start of epoch 0, each epoch ``E = ceil((S - 1) / K) x K``
of them (``S`` the epoch's stream tokens; the last global batch of an epoch is
completed with padding). Every boundary is rounded down to a whole global batch, so a
batch never straddles two phases, and is then a multiple of every phase's block: the
rows of phase ``p`` are the stream's tokens ``[T_p + j b, T_p + j b + b + 1)``, the
next phase's first row starts on the token where the last row of the previous one
ended, and every adjacent pair of the stream is a target exactly once across the
boundary. :class:`EpochPhases` is that table for one epoch (the phases that fall in it,
from a closed form: no state).
"""

from __future__ import annotations

import math
import numbers
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mixle._checks import positive_int
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["SCHEDULE_VERSION", "BlockPhase", "BlockSchedule", "EpochPhases", "epoch_tokens"]

#: Version of the schedule record in a stream identity (``block_schedule``).
SCHEDULE_VERSION = 1


@dataclass(frozen=True, slots=True)
class BlockPhase:
    """One phase: ``block`` tokens per row until ``until``, ``batch_size`` rows per rank.

    Attributes
    ----------
    block
        Positive integer: tokens per row input in this phase.
    until
        Where the phase ends: an ``int`` count of tokens of the run (targets from the
        start of epoch 0), or a ``float`` fraction in ``(0, 1)`` of the schedule's
        ``total_tokens`` (by default, of one epoch's tokens). ``None`` for the last
        phase, which runs to the end of the stream.
    batch_size
        Rows per rank in this phase, or ``None`` (default): the rows that keep the
        tokens per global batch constant. A value given must keep them constant.
    """

    block: int
    until: int | float | None = None
    batch_size: int | None = None


def _as_phase(index: int, value: Any) -> BlockPhase:
    if isinstance(value, BlockPhase):
        phase = value
    elif isinstance(value, tuple) and 1 <= len(value) <= 3:
        # The documented entry order is (until, block[, batch_size]); a bare (block,)
        # is the last phase.
        if len(value) == 1:
            phase = BlockPhase(value[0])
        else:
            phase = BlockPhase(value[1], value[0], *value[2:])
    else:
        raise ArgumentTypeError(
            f"block schedule phase {index} must be a BlockPhase or an (until, block[, "
            f"batch_size]) tuple. Got {value!r} instead."
        )
    block = _phase_int(index, "block", phase.block)
    batch = None if phase.batch_size is None else _phase_int(index, "batch_size", phase.batch_size)
    return BlockPhase(block, phase.until, batch)


def _phase_int(index: int, field: str, value: Any) -> int:
    try:
        return positive_int(field, value)
    except ArgumentError:
        raise ArgumentError(
            f"block schedule phase {index} `{field}` must be a positive integer. "
            f"Got {value!r} instead."
        ) from None


def _check_until(index: int, until: Any) -> int | float:
    if isinstance(until, bool) or not isinstance(until, numbers.Real):
        raise ArgumentTypeError(
            f"block schedule phase {index} `until` must be a token count (int) or a "
            f"fraction (float). Got {until!r} instead."
        )
    if not isinstance(until, numbers.Integral):
        until = float(until)
        if not (math.isfinite(until) and 0.0 < until < 1.0):
            raise ArgumentError(
                f"block schedule phase {index} `until` must be a fraction strictly between "
                f"0 and 1 (or an int token count). Got {until!r} instead."
            )
        return until
    if until <= 0:
        raise ArgumentError(
            f"block schedule phase {index} `until` must be a positive token count. "
            f"Got {until} instead."
        )
    return int(until)


class BlockSchedule:
    """Phases of context length over a run (see the module docstring).

    Parameters
    ----------
    phases
        :class:`BlockPhase` objects, or ``(until, block[, batch_size])`` tuples (the last
        one ``(None, block)`` or ``(block,)``): every phase but the last ends at its
        ``until``, strictly after the previous one, and all ``until`` are of one kind
        (token counts, or fractions).
    total_tokens
        What a fraction ``until`` is a fraction of: the run's tokens (``mixle train``
        passes ``steps x tokens per global batch``). ``None`` (default): one epoch's
        tokens.

    Raises
    ------
    ArgumentTypeError, ArgumentError
        No phase, a block or batch size that is not a positive integer, an ``until``
        that is missing (on any phase but the last), given on the last phase, not
        positive, a fraction outside ``(0, 1)``, of another kind than the others, or
        not after the previous phase's; each named by its phase.
    """

    def __init__(
        self,
        phases: Sequence[BlockPhase | tuple[Any, ...]],
        *,
        total_tokens: int | None = None,
    ) -> None:
        if isinstance(phases, str | bytes) or not isinstance(phases, Sequence) or not phases:
            raise ArgumentError(
                f"a block schedule needs at least one phase. Got {phases!r} instead."
            )
        checked = [_as_phase(i, p) for i, p in enumerate(phases)]
        last = len(checked) - 1
        untils: list[int | float] = []
        for i, phase in enumerate(checked):
            if i == last:
                if phase.until is not None:
                    raise ArgumentError(
                        f"block schedule phase {i} is the last: it runs to the end of the "
                        f"stream and takes no `until`. Got until={phase.until!r}."
                    )
                continue
            if phase.until is None:
                raise ArgumentError(
                    f"block schedule phase {i} `until` is missing: every phase but the "
                    "last ends at a token count or a fraction."
                )
            until = _check_until(i, phase.until)
            if untils and isinstance(until, float) != isinstance(untils[0], float):
                raise ArgumentError(
                    f"block schedule phase {i} `until` is {until!r} but phase 0's is "
                    f"{untils[0]!r}: give every `until` as token counts or every one as "
                    "fractions."
                )
            if untils and until <= untils[-1]:
                raise ArgumentError(
                    f"block schedule phases must end in increasing order: phase {i} "
                    f"`until` {until!r} is not after phase {i - 1}'s {untils[-1]!r}."
                )
            untils.append(until)
        self.phases: tuple[BlockPhase, ...] = tuple(
            BlockPhase(p.block, u, p.batch_size)
            for p, u in zip(checked, [*untils, None], strict=True)
        )
        self.total_tokens = (
            None if total_tokens is None else positive_int("total_tokens", total_tokens)
        )

    @classmethod
    def parse(cls, text: str, *, total_tokens: int | None = None) -> BlockSchedule:
        """A schedule from ``[BATCHx]BLOCK[:UNTIL],...``: e.g. ``"2048:0.9,8192"`` (2048
        for the first 90% of the tokens, then 8192) or ``"16x2048:1000000,4x8192"``. An
        ``UNTIL`` with a ``.`` is a fraction, else a token count; the last phase has none.

        Raises
        ------
        ArgumentError
            The text does not read as such a schedule (the phase named), or the
            schedule is invalid (as the constructor).
        """
        if not isinstance(text, str) or not text.strip():
            raise ArgumentError(f"a block schedule must be a non-empty string. Got {text!r}.")
        phases = [_parse_phase(i, part.strip()) for i, part in enumerate(text.split(","))]
        return cls(phases, total_tokens=total_tokens)

    @property
    def largest_block(self) -> int:
        """The longest row of any phase (what a model must be built for)."""
        return max(p.block for p in self.phases)

    @property
    def first_block(self) -> int:
        return self.phases[0].block

    def check_block(self, block: int) -> None:
        """Refuse a stream ``block`` that is not the first phase's."""
        if block != self.first_block:
            raise ArgumentError(
                f"`block` must be the block schedule's first block ({self.first_block}): the "
                f"stream starts in phase 0. Got block={block} instead."
            )

    def batch_sizes(self, world_size: int, batch_size: int) -> tuple[int, ...]:
        """Rows per rank of every phase for a stream of ``world_size`` ranks and
        ``batch_size`` rows per rank in phase 0, keeping the tokens per global batch at
        ``world_size x batch_size x`` the first block.

        Raises
        ------
        ArgumentError
            A phase's block does not divide those tokens into whole rows on every rank,
            or a phase's ``batch_size`` is not the one that keeps them constant (the
            phase, its field and both counts named).
        """
        tokens = world_size * batch_size * self.first_block
        sizes = []
        for i, phase in enumerate(self.phases):
            rows, extra = divmod(tokens, world_size * phase.block)
            if extra:
                raise ArgumentError(
                    f"block schedule phase {i} `block` {phase.block} does not cut "
                    f"{tokens} tokens per global batch ({world_size} ranks x {batch_size} "
                    f"rows x {self.first_block}) into whole rows on every rank: the tokens "
                    "per global batch stay constant, so world_size x block must divide them."
                )
            if phase.batch_size is not None and phase.batch_size != rows:
                raise ArgumentError(
                    f"block schedule phase {i} `batch_size` {phase.batch_size} with block "
                    f"{phase.block} gives {world_size * phase.batch_size * phase.block} tokens "
                    f"per global batch, not {tokens} ({world_size} x {batch_size} x "
                    f"{self.first_block}): the tokens per global batch must stay constant "
                    f"(batch_size {rows} here, or leave it out)."
                )
            sizes.append(rows)
        return tuple(sizes)

    def boundaries(self, tokens_per_batch: int, epoch_targets: int) -> tuple[int, ...]:
        """Where each phase but the last ends, in tokens of the run: its ``until``
        (a fraction of ``total_tokens``, or else of ``epoch_targets``) rounded down to a
        whole global batch of ``tokens_per_batch``.

        Raises
        ------
        ArgumentError
            A phase that holds no whole global batch after that rounding.
        """
        total = self.total_tokens if self.total_tokens is not None else epoch_targets
        ends: list[int] = []
        for i, phase in enumerate(self.phases[:-1]):
            until = phase.until
            raw = math.floor(until * total) if isinstance(until, float) else int(until or 0)
            end = raw // tokens_per_batch * tokens_per_batch
            start = ends[-1] if ends else 0
            if end <= start:
                raise ArgumentError(
                    f"block schedule phase {i} ends at token {raw} (until={until!r}), which "
                    f"holds no whole global batch of {tokens_per_batch} tokens after its start "
                    f"at token {start}: a phase needs at least one."
                )
            ends.append(end)
        return tuple(ends)

    def identity(self) -> dict[str, Any]:
        """The schedule as a stream identity records it (versioned, JSON-able;
        ``total_tokens`` only when a fraction is taken of it)."""
        fractions = any(isinstance(p.until, float) for p in self.phases)
        return {
            "version": SCHEDULE_VERSION,
            "phases": [[p.until, p.block] for p in self.phases],
            "total_tokens": self.total_tokens if fractions else None,
        }

    def __repr__(self) -> str:
        phases = ", ".join(f"({p.until!r}, {p.block}, {p.batch_size!r})" for p in self.phases)
        return f"BlockSchedule([{phases}], total_tokens={self.total_tokens!r})"


def _parse_phase(index: int, text: str) -> BlockPhase:
    head, colon, until_text = text.partition(":")
    batch_text, x, block_text = head.rpartition("x")
    try:
        block = int(block_text)
        batch = int(batch_text) if x else None
        until: int | float | None = None
        if colon:
            until = float(until_text) if "." in until_text else int(until_text)
    except ValueError:
        raise ArgumentError(
            f"block schedule phase {index} {text!r} must read [BATCHx]BLOCK[:UNTIL] (e.g. "
            "2048:0.9 or 16x2048:1000000; the last phase without :UNTIL)."
        ) from None
    return BlockPhase(block, until, batch)


def epoch_tokens(stream_tokens: int, tokens_per_batch: int) -> int:
    """Tokens of the run one epoch of ``stream_tokens`` covers: its targets rounded up
    to whole global batches (the cursor index at which the epoch ends)."""
    if stream_tokens < 2:
        return 0
    return -(-(stream_tokens - 1) // tokens_per_batch) * tokens_per_batch


@dataclass(frozen=True, slots=True)
class EpochPhases:
    """The phases that fall in one epoch: phase ``phases[i]`` rules the epoch's tokens
    ``[starts[i], starts[i + 1])`` (the last to ``end``) with ``blocks[i]``-token rows,
    ``batch_sizes[i]`` of them per rank per step."""

    starts: tuple[int, ...]
    phases: tuple[int, ...]
    blocks: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    end: int

    @classmethod
    def of_epoch(
        cls,
        epoch: int,
        size: int,
        boundaries: Sequence[int],
        blocks: Sequence[int],
        batch_sizes: Sequence[int],
    ) -> EpochPhases:
        """Epoch ``epoch`` of a run whose every epoch covers ``size`` tokens and whose
        phases end at the run tokens ``boundaries``."""
        offset = epoch * size
        starts: list[int] = []
        phases: list[int] = []
        for p in range(len(blocks)):
            begin = 0 if p == 0 else boundaries[p - 1] - offset
            stop = boundaries[p] - offset if p < len(boundaries) else size
            begin, stop = min(max(begin, 0), size), min(max(stop, 0), size)
            if stop > begin or (p == len(blocks) - 1 and not phases):
                starts.append(begin)
                phases.append(p)
        return cls(
            tuple(starts),
            tuple(phases),
            tuple(blocks[p] for p in phases),
            tuple(batch_sizes[p] for p in phases),
            size,
        )

    def at(self, token: int) -> int:
        """Position in this table of the phase that rules the epoch's token ``token``."""
        return max(bisect_right(self.starts, token) - 1, 0)

    def stop(self, position: int) -> int:
        """Where the phase at ``position`` of the table ends in the epoch."""
        return self.starts[position + 1] if position + 1 < len(self.starts) else self.end
