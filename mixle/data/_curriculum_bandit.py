"""``LengthBandit``: a ready ``sequence_selector`` policy that rations long documents.

The seed's curriculum hook (:func:`~mixle.data._order.global_document_order`) is called
once per epoch with the epoch's base permutation. This policy sorts documents into
length buckets (``edges`` ``e0 < e1 < ...`` give ``[0, e0), [e0, e1), ..., [e_last, inf)``)
and keeps each document of bucket ``b`` with probability ``p_b / max(p)``: the bucket
the policy favours most is kept whole, the others are rationed. The trainer reports a
reward per bucket (e.g. the decrease of its per-token loss); at the start of the next
epoch the rewards received are folded into the weights.

Why EXP3 and not Thompson sampling: the reward of a length bucket (loss decrease per
token) drifts as training goes on and follows no likelihood (it is neither Bernoulli
nor Gaussian with a fixed mean), so a posterior would model the wrong thing; EXP3's
guarantee holds for any bounded reward sequence, even an adversarial one, and its state
is one log-weight per bucket. The policy is the exponential-weights update with EXP3's
uniform exploration: ``p = (1 - exploration) * softmax(log_weights) + exploration / K``,
then ``log_weights[b] += learning_rate * mean reward of b``. The exploration floor keeps
every bucket sampled every epoch, so each bucket's reward is observed directly and needs
no importance weighting.

Deterministic: the kept documents are a pure function of ``(seed, stream seed, epoch,
probabilities of the epoch)`` and the probabilities of the rewards reported before the
epoch was first planned. The probabilities each planned epoch used are kept (K floats
per epoch), so planning an epoch again (a restart, a second look) gives the same order.
:meth:`LengthBandit.state_dict` holds all of it; :class:`~mixle.data.StreamingCorpus`
saves it beside its cursor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from mixle._checks import exact_int, nonnegative_int
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError

__all__ = ["LengthBandit"]

POLICY = "exp3-length-buckets"
STATE_VERSION = 1
_KEEP_STREAM = 0x4C42  # keys the keep draws apart from the base permutation's stream
_CONFIG_FIELDS = ("policy", "edges", "seed", "exploration", "learning_rate", "bucket_sizes")


def _unit_interval(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ArgumentError(f"`{name}` must be a number in (0, 1]. Got {value!r} instead.")
    return float(value)


def checked_edges(name: str, edges: Sequence[int]) -> tuple[int, ...]:
    """``edges`` as a tuple, or an error naming ``name``: at least one, each a positive
    integer greater than the one before."""
    checked = tuple(exact_int(f"{name}[{i}]", edge) for i, edge in enumerate(edges))
    if not checked:
        raise ArgumentError(f"`{name}` must name at least one length (two buckets). Got ().")
    for i, edge in enumerate(checked):
        if edge <= (checked[i - 1] if i else 0):
            raise ArgumentError(
                f"`{name}` must be positive and strictly increasing. Got {name}[{i}]={edge} "
                f"after {checked[i - 1] if i else 0}."
            )
    return checked


class LengthBandit:
    """EXP3 over document-length buckets, used as ``sequence_selector`` (module docstring).

    Parameters
    ----------
    lengths
        Every document's token count, in corpus order (``documents.lengths``).
    edges
        Positive, strictly increasing bucket edges; ``len(edges) + 1`` buckets.
    seed
        Keys the keep draws (with the stream's seed and the epoch).
    exploration
        EXP3's ``gamma`` in ``(0, 1]``: the uniform share of every bucket's probability.
    learning_rate
        Step of the log-weights per unit of mean reward, in ``(0, 1]``.

    Raises
    ------
    ArgumentError
        Bad ``edges``/``exploration``/``learning_rate``/``seed``, a negative length, or a
        bucket with no documents (named with its length range).
    """

    def __init__(
        self,
        lengths: ArrayLike,
        *,
        edges: Sequence[int],
        seed: int = 0,
        exploration: float = 0.1,
        learning_rate: float = 1.0,
    ) -> None:
        self.edges = checked_edges("edges", edges)
        self.seed = nonnegative_int("seed", seed)
        self.exploration = _unit_interval("exploration", exploration)
        self.learning_rate = _unit_interval("learning_rate", learning_rate)
        table = np.asarray(lengths)
        if table.ndim != 1 or (table.size and table.dtype.kind not in "iu"):
            raise ArgumentTypeError("`lengths` must be a 1-D array of integer token counts.")
        if table.size and int(table.min()) < 0:
            raise ArgumentError(f"`lengths` must be nonnegative. Got {int(table.min())}.")
        self._buckets = np.searchsorted(np.asarray(self.edges), table, side="right")
        sizes = np.bincount(self._buckets, minlength=self.num_buckets)
        for bucket, size in enumerate(sizes):
            if size == 0:
                raise ArgumentError(
                    f"{self.bucket_name(bucket)} has no documents: choose `edges` "
                    f"(length_buckets) between the shortest ({int(table.min())}) and the "
                    f"longest ({int(table.max())}) document."
                )
        self.bucket_sizes = tuple(int(size) for size in sizes)
        self.log_weights = np.zeros(self.num_buckets)
        self._reward_sum = np.zeros(self.num_buckets)
        self._reward_count = np.zeros(self.num_buckets, dtype=np.int64)
        self._planned: dict[int, np.ndarray] = {}

    @property
    def num_buckets(self) -> int:
        return len(self.edges) + 1

    def bucket_name(self, bucket: int) -> str:
        """``"bucket 1 (lengths [512, 2048))"``: a bucket as messages name it."""
        low = self.edges[bucket - 1] if bucket else 0
        high = str(self.edges[bucket]) if bucket < len(self.edges) else "inf"
        return f"bucket {bucket} (lengths [{low}, {high}))"

    def buckets_of(self, documents: ArrayLike) -> np.ndarray:
        """The bucket of each document index in ``documents``."""
        return self._buckets[np.asarray(documents, dtype=np.int64)]

    def report(self, bucket: int, reward: float) -> None:
        """Record one reward for ``bucket``; it counts from the next planned epoch on.

        Raises
        ------
        ArgumentError
            ``bucket`` is not one of ``range(num_buckets)``, or ``reward`` is not a
            finite number (NaN, inf) — the bucket is named.
        """
        bucket = exact_int("bucket", bucket)
        if not 0 <= bucket < self.num_buckets:
            raise ArgumentError(
                f"reward for unknown bucket {bucket}: this LengthBandit has buckets "
                f"0..{self.num_buckets - 1} (edges {list(self.edges)})."
            )
        if isinstance(reward, bool) or not isinstance(reward, int | float | np.floating):
            raise ArgumentTypeError(
                f"reward for {self.bucket_name(bucket)} must be a number. Got {reward!r}."
            )
        if not math.isfinite(reward):
            raise ArgumentError(
                f"reward for {self.bucket_name(bucket)} must be finite. Got {reward!r}."
            )
        self._reward_sum[bucket] += float(reward)
        self._reward_count[bucket] += 1

    def probabilities(self, epoch: int) -> np.ndarray:
        """The bucket probabilities of ``epoch``: the saved ones if it was planned,
        else the current weights with the pending rewards folded in (then saved).

        Raises
        ------
        ArgumentError
            ``epoch`` precedes the last planned epoch and was never planned itself.
        """
        epoch = nonnegative_int("epoch", epoch)
        planned = self._planned.get(epoch)
        if planned is not None:
            return planned
        if self._planned and epoch < max(self._planned):
            raise ArgumentError(
                f"LengthBandit plans epochs in order: epoch {epoch} comes before the "
                f"planned epoch {max(self._planned)} and was never planned."
            )
        seen = self._reward_count > 0
        means = np.divide(self._reward_sum, np.maximum(self._reward_count, 1))
        self.log_weights = self.log_weights + np.where(seen, self.learning_rate * means, 0.0)
        self._reward_sum[:] = 0.0
        self._reward_count[:] = 0
        shifted = np.exp(self.log_weights - self.log_weights.max())
        gamma = self.exploration
        probabilities = (1 - gamma) * shifted / shifted.sum() + gamma / self.num_buckets
        self._planned[epoch] = probabilities
        return probabilities

    def __call__(self, order: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        """The ``sequence_selector`` hook: ``order`` with the rationed documents left out."""
        probabilities = self.probabilities(epoch)
        keep = probabilities / probabilities.max()
        key = np.random.SeedSequence([self.seed, seed, epoch, _KEEP_STREAM])
        draws = np.random.Generator(np.random.PCG64(key)).random(len(order))
        order = np.asarray(order, dtype=np.int64)
        return order[draws < keep[self._buckets[order]]]

    def _config(self) -> dict[str, Any]:
        return {
            "policy": POLICY,
            "edges": list(self.edges),
            "seed": self.seed,
            "exploration": self.exploration,
            "learning_rate": self.learning_rate,
            "bucket_sizes": list(self.bucket_sizes),
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: the configuration, log-weights, pending rewards and each
        planned epoch's probabilities (floats round-trip exactly through JSON)."""
        return {
            "version": STATE_VERSION,
            **self._config(),
            "log_weights": self.log_weights.tolist(),
            "reward_sum": self._reward_sum.tolist(),
            "reward_count": self._reward_count.tolist(),
            "planned": {str(epoch): p.tolist() for epoch, p in sorted(self._planned.items())},
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore a :meth:`state_dict`.

        Raises
        ------
        StateMismatchError
            ``state`` is not a version-1 LengthBandit state, comes from another
            curriculum (each differing field named with both values), or holds a
            per-bucket list of the wrong length or non-finite values (field named).
        """
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise StateMismatchError(
                f"LengthBandit state must be a version-{STATE_VERSION} dict from state_dict(). "
                f"Got {state.get('version') if isinstance(state, dict) else type(state).__name__!r}."
            )
        config = self._config()
        differences = [
            f"{field} (saved {state.get(field)!r}, this policy {config[field]!r})"
            for field in _CONFIG_FIELDS
            if state.get(field) != config[field]
        ]
        if differences:
            raise StateMismatchError(
                "LengthBandit state is from another curriculum: " + "; ".join(differences)
            )
        log_weights = self._bucket_list(state, "log_weights")
        reward_sum = self._bucket_list(state, "reward_sum")
        reward_count = self._bucket_list(state, "reward_count")
        planned = state.get("planned")
        if not isinstance(planned, dict):
            raise StateMismatchError("LengthBandit state field `planned` must be a dict.")
        epochs = {}
        for epoch in planned:
            if not str(epoch).isdigit():
                raise StateMismatchError(
                    f"LengthBandit state field `planned` has a bad epoch {epoch!r}."
                )
            epochs[int(epoch)] = self._bucket_list(planned, epoch, f"planned[{epoch}]")
        if (reward_count < 0).any() or (reward_count != np.round(reward_count)).any():
            raise StateMismatchError(
                "LengthBandit state field `reward_count` must hold nonnegative integers."
            )
        self.log_weights, self._reward_sum = log_weights, reward_sum
        self._reward_count = reward_count.astype(np.int64)
        self._planned = epochs

    def _bucket_list(self, state: dict[str, Any], key: str, field: str | None = None) -> np.ndarray:
        field = field or key
        values = state.get(key)
        if not isinstance(values, list) or len(values) != self.num_buckets:
            raise StateMismatchError(
                f"LengthBandit state field `{field}` must be a list of {self.num_buckets} "
                f"numbers (one per bucket). Got {values!r}."
            )
        array = np.asarray(values, dtype=np.float64)
        if not np.isfinite(array).all():
            bad = int(np.flatnonzero(~np.isfinite(array))[0])
            raise StateMismatchError(
                f"LengthBandit state field `{field}` is not finite for {self.bucket_name(bad)}."
            )
        return array
