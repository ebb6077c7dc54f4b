"""A variable-sequence-length stream's plan inverted for one document: its rows.

A :class:`~mixle.data.VariableLengthStream` trains every piece of every document once
per epoch (:mod:`~mixle.data._vsl_buckets`). For one document, in closed form:

1. its pieces and their ordinals in their buckets
   (:meth:`~mixle.data._vsl_buckets.BucketPieces.of_document`: O(log documents) per
   bucket);
2. per epoch, each piece's place ``p`` in its bucket's keyed piece order
   (:meth:`~mixle.data.VariableLengthStream.piece_order`, inverted): the bucket's batch
   ordinal ``p // n`` and row ``p % n`` of that global batch of ``n`` rows
   (:meth:`~mixle.data.VariableLengthStream.rows_per_batch`);
3. the batch's index ``i`` in the epoch, the curriculum inverted
   (:meth:`~mixle.data._vsl_curriculum.CurriculumPlan.indices`: a binary search over
   the segments, one inverse permutation lookup);
4. its place as the trainer takes it: step ``e * B + i + 1`` of epoch ``e`` (``B``
   batches per epoch, the same every epoch; step 1 is the run's first batch), rank
   ``r`` reading rows ``[r * c, (r + 1) * c)`` of the global batch (``c = n /
   world_size``) as its rows ``0 .. c - 1``.

A piece of ``t`` real targets from token ``s`` trains the document's tokens
``[s + 1, s + t + 1)`` (a padded remainder piece: its real targets only). No pass over
an epoch's batches or pieces: O(pieces of the document x log) per epoch. The
``"bandit"`` curriculum picks buckets from the training rewards and cannot be inverted.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mixle.data._vsl_stream import VariableLengthStream
from mixle.errors import ArgumentError

__all__ = ["vsl_spans"]

Place = tuple[int, int, int]
"""``(step, rank, row)`` of a row of a rank's batch."""


def vsl_spans(
    stream: VariableLengthStream, document: int, epochs: list[int]
) -> Iterator[tuple[int, Place, int, int]]:
    """``(epoch, (step, rank, row), start, stop)`` of every row of ``stream`` (any rank:
    the answer covers every rank) that trains ``document`` (a valid index) in
    ``epochs``, piece by piece.

    Raises
    ------
    ArgumentError
        ``stream``'s curriculum is ``"bandit"`` (its batches follow the rewards).
    """
    plan = stream.plan
    if plan is None:
        raise ArgumentError(
            f"curriculum={stream.curriculum!r} picks each batch's bucket from the training "
            "rewards: sightings need a closed-form curriculum ('natural' or 'grow_p2')."
        )
    pieces = stream.pieces.of_document(document)
    per_epoch = stream.epoch_size(0)
    for epoch in epochs:
        for bucket in np.unique(pieces.buckets).tolist():
            chosen = pieces.buckets == bucket
            rows = stream.rows_per_batch(bucket)
            count = rows // stream.world_size
            places = stream.piece_order(epoch, bucket).inverse(pieces.ordinals[chosen])
            batches, within = np.divmod(places, rows)
            indices = plan.indices(epoch, bucket, batches)
            ranks, in_rank = np.divmod(within, count)
            firsts = pieces.starts[chosen] + 1
            for index, rank, row, first, targets in zip(
                indices.tolist(),
                ranks.tolist(),
                in_rank.tolist(),
                firsts.tolist(),
                pieces.targets[chosen].tolist(),
                strict=True,
            ):
                yield epoch, (epoch * per_epoch + index + 1, rank, row), first, first + targets
