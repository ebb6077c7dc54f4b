"""Streaming stochastic EM: fit a mixture over a document stream larger than memory.

:func:`document_batches` reads whole documents lazily from any sequence (a memory-mapped
corpus from :func:`mixle.corpus.open_corpus`, say) in a seeded shuffled order, a
mini-batch at a time. :func:`stream_em` takes one stochastic-EM step per mini-batch:

1. **E-step** with the current mixture: responsibilities ``r_ik`` of every document of
   the batch (log-sum-exp over the experts' document log-densities).
2. **M-step**: the mixture's estimator with the batch's statistic — every expert with
   responsibility mass takes *one* step of its persistent optimizer on its
   responsibility-weighted documents (a shared embedding steps once, with all experts'
   gradients); an expert with no mass keeps its model.
3. **Weights**: ``w <- (1 - weight_rate) * w + weight_rate * w_batch``, where
   ``w_batch = (R_k + a) / (sum_j R_j + K a)`` is the batch's M-step estimate. With
   ``weight_rate=1`` the weights are the batch estimate (plain stochastic EM); smaller
   rates average over recent batches.

Resumable like :func:`mixle.models.stream_fit`: the returned mixture's ``to_dict`` holds
everything the next step depends on (weights, every expert's weights and optimizer, each
shared table and its optimizer). ``stream_em(from_dict(d), rest)`` continues bitwise on
CPU as if never interrupted; the data position is the caller's (e.g. ``start_batch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mixle._checks import nonnegative_int, positive_int
from mixle.data import global_document_order
from mixle.errors import ArgumentError, ArgumentTypeError
from mixle.stats.mixture import MixtureAccumulator, MixtureDistribution, MixtureEstimator

__all__ = ["document_batches", "stream_em"]


def document_batches(
    documents: Sequence[Any],
    batch_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    start_batch: int = 0,
) -> Iterator[list[Any]]:
    """Yield lists of ``batch_size`` whole documents (the last list may be shorter).

    The order is ``mixle.data.global_document_order(len(documents), seed=seed,
    epoch=epoch)``: a pure function of its arguments, so a run resumes at batch ``k``
    with ``start_batch=k``. Documents are read only when their batch is yielded, so
    memory holds O(``len(documents)``) int64 indices plus one batch.

    Raises
    ------
    ArgumentError
        A non-positive ``batch_size`` or a negative ``seed``/``epoch``/``start_batch``.
    """
    size = positive_int("batch_size", batch_size)
    start = nonnegative_int("start_batch", start_batch)
    order = global_document_order(len(documents), seed=seed, epoch=epoch)
    for first in range(start * size, order.shape[0], size):
        yield [documents[int(i)] for i in order[first : first + size]]


def stream_em(
    mixture: MixtureDistribution,
    batches: Iterable[Sequence[Any]],
    *,
    estimator: MixtureEstimator | None = None,
    pseudo_count: float | None = None,
    weight_rate: float = 0.1,
    max_steps: int | None = None,
    report_every: int = 0,
    log: Callable[[str], Any] | None = None,
) -> MixtureDistribution:
    """Fit ``mixture`` by stochastic EM, one step per mini-batch (see the module docstring).

    Parameters
    ----------
    mixture
        The current mixture (its live experts are trained in place).
    batches
        An iterable of observation batches (e.g. :func:`document_batches`), consumed
        once, lazily; empty batches are skipped.
    estimator
        The M-step to use at every step (default ``mixture.estimator(pseudo_count)``,
        rebuilt each step). Pass one to configure the components' estimators, e.g. a
        ``CategoricalEstimator(K, pseudo_count=1.0)`` field; its live components must be
        the mixture's own (``leaf.estimator()``). Pure components (a categorical) are
        re-estimated from each mini-batch's statistic alone.
    pseudo_count
        Added to every expert's responsibility total in the weights' M-step (only
        without ``estimator``, which carries its own).
    weight_rate
        In ``(0, 1]``: how far the weights move toward each batch's estimate.
    max_steps
        Stop after this many steps (``None``: exhaust ``batches``).
    report_every, log
        Call ``log`` every ``report_every`` steps (0: never) with the step, the mean
        negative log-density per observation over the window and the weights.

    Returns
    -------
    MixtureDistribution
        The fitted mixture (the same live experts).

    Raises
    ------
    ArgumentTypeError, ArgumentError
        Bad arguments; errors of a component are raised naming it.
    """
    if not isinstance(mixture, MixtureDistribution):
        raise ArgumentTypeError(
            f"`mixture` must be a MixtureDistribution. Got {type(mixture).__name__} instead."
        )
    rate = float(weight_rate) if isinstance(weight_rate, int | float) else math.nan
    if isinstance(weight_rate, bool) or not 0.0 < rate <= 1.0:
        raise ArgumentError(f"`weight_rate` must be in (0, 1]. Got {weight_rate!r} instead.")
    limit = None if max_steps is None else nonnegative_int("max_steps", max_steps)
    every = nonnegative_int("report_every", report_every)
    if log is not None and not callable(log):
        raise ArgumentTypeError(f"`log` must be callable or None. Got {type(log).__name__}.")
    if estimator is not None:
        if not isinstance(estimator, MixtureEstimator):
            raise ArgumentTypeError(
                f"`estimator` must be a MixtureEstimator. Got {type(estimator).__name__} instead."
            )
        if estimator.num_components != mixture.num_components or pseudo_count is not None:
            raise ArgumentError(
                f"`estimator` must have the mixture's {mixture.num_components} components and "
                f"carries its own pseudo_count. Got {estimator.num_components} components, "
                f"pseudo_count={pseudo_count!r}."
            )
    encoder = mixture.dist_to_encoder()
    steps, window_nll, window_count = 0, 0.0, 0
    for batch in batches if limit != 0 else ():
        if len(batch) == 0:
            continue
        enc = encoder.seq_encode(batch)
        step = mixture.estimator(pseudo_count) if estimator is None else estimator
        accumulator = step.accumulator_factory().make()
        assert isinstance(accumulator, MixtureAccumulator)
        posterior, log_density = mixture.e_step(enc)
        accumulator.seq_update_posterior(enc, np.ones(posterior.shape[0]), posterior, mixture)
        fitted = step.estimate(None, accumulator.value())
        weights = (1.0 - rate) * mixture.weights + rate * fitted.weights
        mixture = fitted.with_weights(weights / math.fsum(weights.tolist()))
        steps += 1
        window_nll -= math.fsum(log_density.tolist())
        window_count += posterior.shape[0]
        if log is not None and every and steps % every == 0:
            shown = ", ".join(f"{w:.3f}" for w in mixture.weights)
            log(f"step {steps} | nll/obs {window_nll / window_count:.4f} | weights [{shown}]")
            window_nll, window_count = 0.0, 0
        if limit is not None and steps >= limit:
            break
    return mixture
