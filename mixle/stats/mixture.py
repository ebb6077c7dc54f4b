"""``MixtureDistribution``/``MixtureEstimator``: finite mixtures fit by EM.

``p(x) = sum_k w_k p_k(x)``. One EM iteration over weighted data ``(x_i, v_i)``:

* **E-step** — responsibilities ``r_ik = w_k p_k(x_i) / p(x_i)``, computed from every
  component's ``seq_log_density`` in log space (``log w_k + log p_k(x_i)`` minus its
  log-sum-exp over ``k``), so log-densities of ``-1e5`` and below are handled exactly.
* **M-step** — component ``k``'s accumulator sees the data with weights ``v_i r_ik``;
  its estimator turns that statistic into the new component. The weights become
  ``(R_k + a) / (sum_j R_j + K a)`` with ``R_k = sum_i v_i r_ik`` and ``a`` the optional
  pseudo-count.

Live components (transformer leaves, :mod:`mixle.stats.tied`) take one optimizer step in
the M-step; a live component with ``R_k = 0`` keeps its model (no step). Components that
hold the *same* :class:`~mixle.stats.CategoricalEmbedding` share it: each steps all its
other parameters, and the table is stepped once with the gradient of all of them
(:class:`~mixle.stats.tied.SharedEmbedding`).

Responsibility totals are summed exactly, so accumulators combine exactly: splitting
data across accumulators and combining them equals one accumulator (bitwise for exact
components such as :class:`~mixle.stats.CategoricalDistribution`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mixle._checks import positive_int
from mixle.errors import ArgumentError, ArgumentTypeError, CheckpointError
from mixle.stats._compose import (
    PartsAccumulatorFactory,
    combine_parts,
    from_part_values,
    naming_part,
    part_name,
    parts,
)
from mixle.stats._exact import ExactSums
from mixle.stats._sampling import draw_indices, part_samplers, sampler_rng
from mixle.stats.base import (
    DataSequenceEncoder,
    DistributionSampler,
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
    SequenceEncodableStatisticAccumulator,
    StatisticAccumulatorFactory,
    as_weights,
)
from mixle.stats.categorical import as_probabilities, as_pseudo_count, normalized
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import from_dict, register, require_version, tensors_to_blob
from mixle.stats.tied import (
    EmbeddingTiedDistribution,
    EmbeddingTiedEstimator,
    LiveEstimator,
    SharedEmbedding,
)

__all__ = [
    "MixtureAccumulator",
    "MixtureAccumulatorFactory",
    "MixtureDistribution",
    "MixtureEstimator",
    "MixtureSampler",
    "MixtureStatistic",
]


def _name(k: int, obj: Any) -> str:
    return part_name("component", k, obj)


def _require_components(items: Any, kind: type, what: str) -> list[Any]:
    return parts(items, kind, what, "component", "a mixture needs at least one component (K >= 1)")


def _agreeing_encoder(
    encoders: list[DataSequenceEncoder], owners: list[Any]
) -> DataSequenceEncoder:
    """Return the one encoder every component uses; raise naming the first that differs."""
    for k in range(1, len(encoders)):
        if encoders[k] != encoders[0]:
            raise ArgumentError(
                f"{_name(k, owners[k])} observes {encoders[k]!r}, but {_name(0, owners[0])} "
                f"observes {encoders[0]!r}; a mixture's components must agree on the "
                "observation type."
            )
    return encoders[0]


def _shared_tables(
    embeddings: list[CategoricalEmbedding | None],
    owners: list[Any],
    declared: CategoricalEmbedding | None,
) -> list[CategoricalEmbedding]:
    """Return the tables held by two or more components (or the declared one), validated."""
    if declared is not None:
        if not isinstance(declared, CategoricalEmbedding):
            raise ArgumentTypeError(
                f"`embedding` must be a CategoricalEmbedding. Got {type(declared).__name__} instead."
            )
        for k, table in enumerate(embeddings):
            if table is declared:
                continue
            if table is None:
                raise ArgumentError(
                    f"{_name(k, owners[k])} holds no CategoricalEmbedding, so it cannot share "
                    f"the declared embedding (vocab {declared.vocab}, dim {declared.dim})."
                )
            if (table.vocab, table.dim) != (declared.vocab, declared.dim):
                raise ArgumentError(
                    f"{_name(k, owners[k])} holds an embedding of vocab {table.vocab}, dim "
                    f"{table.dim}, but the shared embedding has vocab {declared.vocab}, dim "
                    f"{declared.dim}; build every expert with the same CategoricalEmbedding."
                )
            raise ArgumentError(
                f"{_name(k, owners[k])} holds its own CategoricalEmbedding, not the shared one; "
                "build every expert with the same CategoricalEmbedding instance."
            )
    if declared is not None:
        return [declared]
    tables: list[CategoricalEmbedding] = []
    for table in embeddings:
        held_twice = sum(t is table for t in embeddings) >= 2
        if table is not None and held_twice and all(table is not t for t in tables):
            tables.append(table)
    return tables


def _embedding_of(item: Any) -> CategoricalEmbedding | None:
    if isinstance(item, EmbeddingTiedDistribution | EmbeddingTiedEstimator):
        return item.embedding
    return None


def _shared_lr(table: CategoricalEmbedding, items: list[Any]) -> float:
    """The learning rate of the components sharing ``table`` (they must agree)."""
    holders = [
        (k, item)
        for k, item in enumerate(items)
        if isinstance(item, EmbeddingTiedDistribution | EmbeddingTiedEstimator)
        and item.embedding is table
    ]
    k0, first = holders[0]
    for k, item in holders[1:]:
        if item.lr != first.lr:
            raise ArgumentError(
                f"{_name(k, item)} has lr {item.lr} but {_name(k0, first)}, which shares its "
                f"embedding, has lr {first.lr}; experts sharing an embedding must share lr."
            )
    return float(first.lr)


@register("MixtureDistribution")
class MixtureDistribution(SequenceEncodableProbabilityDistribution):
    """``p(x) = sum_k weights[k] * components[k](x)``.

    Parameters
    ----------
    components
        ``K >= 1`` distributions over the same kind of observation (their encoders must be
        equal: e.g. all document leaves of one vocabulary, or all categoricals of one K).
    weights
        ``K`` nonnegative mixing weights summing to 1.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        ``K < 1``, a component that is not a distribution or observes another kind of
        data (the component named), bad weights, or experts sharing an embedding with
        different learning rates.
    """

    def __init__(
        self,
        components: Sequence[SequenceEncodableProbabilityDistribution],
        weights: Any,
        *,
        _shared: list[SharedEmbedding] | None = None,
    ) -> None:
        self.components = _require_components(
            components, SequenceEncodableProbabilityDistribution, "components"
        )
        self.weights = as_probabilities(weights, "mixture `weights`")
        if self.weights.shape[0] != len(self.components):
            raise ArgumentError(
                f"mixture `weights` must hold one weight per component ({len(self.components)}). "
                f"Got {self.weights.shape[0]} instead."
            )
        self.weights.setflags(write=False)
        self._encoder = _agreeing_encoder(
            [c.dist_to_encoder() for c in self.components], self.components
        )
        if _shared is None:
            embeddings = [_embedding_of(c) for c in self.components]
            _shared = [
                SharedEmbedding(t, _shared_lr(t, self.components))
                for t in _shared_tables(embeddings, self.components, None)
            ]
        self._shared = _shared

    @property
    def num_components(self) -> int:
        return len(self.components)

    @property
    def shared_embeddings(self) -> list[CategoricalEmbedding]:
        """The embedding tables shared by two or more components (each listed once)."""
        return [s.embedding for s in self._shared]

    def component_log_densities(self, enc: Any) -> np.ndarray:
        """Return the ``(n, K)`` float64 array ``log p_k(x_i)``."""
        return np.stack(
            [np.asarray(c.seq_log_density(enc), dtype=np.float64) for c in self.components], axis=1
        )

    def _joint(self, enc: Any) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(log w_k + log p_k(x_i), log p(x_i))``; ``log p`` is ``-inf`` where all are."""
        with np.errstate(divide="ignore"):
            joint = self.component_log_densities(enc) + np.log(self.weights)[None, :]
        top = joint.max(axis=1)
        safe = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return joint, safe + np.log(np.exp(joint - safe[:, None]).sum(axis=1))

    def posterior(self, enc: Any) -> np.ndarray:
        """Return the ``(n, K)`` responsibilities ``w_k p_k(x_i) / p(x_i)`` (rows sum to 1).

        Computed as ``exp(log w_k + log p_k(x_i) - logsumexp_k(...))``: stable for any
        finite log-densities (e.g. ``-1e5`` per document).

        Raises
        ------
        ArgumentError
            An observation has probability 0 under every component with positive weight.
        """
        return self.e_step(enc)[0]

    def e_step(self, enc: Any) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(posterior(enc), seq_log_density(enc))`` from one scoring pass."""
        joint, log_total = self._joint(enc)
        impossible = ~np.isfinite(log_total)
        if impossible.any():
            i = int(np.flatnonzero(impossible)[0])
            raise ArgumentError(
                f"observation {i} has log-density {log_total[i]} under the mixture (every "
                "component with positive weight); its responsibilities are undefined."
            )
        return np.exp(joint - log_total[:, None]), log_total

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return ``log p(x_i)`` (log-sum-exp over components) for every observation."""
        return self._joint(enc)[1]

    def log_density(self, x: Any) -> float:
        return float(self.seq_log_density(self._encoder.seq_encode([x]))[0])

    def with_weights(self, weights: Any) -> MixtureDistribution:
        """Return this mixture (same live components and shared tables) with new weights."""
        return MixtureDistribution(self.components, weights, _shared=self._shared)

    def sampler(self, seed: int | None = None) -> MixtureSampler:
        return MixtureSampler(self, seed)

    def estimator(self, pseudo_count: float | None = None) -> MixtureEstimator:
        """Return the estimator that continues this mixture (live components keep their optimizers)."""
        return MixtureEstimator(
            [c.estimator() for c in self.components],
            pseudo_count=pseudo_count,
            _shared=self._shared,
        )

    def dist_to_encoder(self) -> DataSequenceEncoder:
        """The components' common encoder."""
        return self._encoder

    def to_dict(self) -> dict[str, Any]:
        """Serialise weights, components and each shared embedding table (stored once).

        A component holding a shared table is written with ``omit_embedding=True`` and
        the index of its table; the table's own AdamW state travels with it.
        """
        tables = self.shared_embeddings
        entries = []
        for component in self.components:
            index = next(
                (
                    i
                    for i, t in enumerate(tables)
                    if isinstance(component, EmbeddingTiedDistribution) and component.embedding is t
                ),
                None,
            )
            if index is None:
                entries.append({"dict": component.to_dict(), "embedding": None})
            else:
                assert isinstance(component, EmbeddingTiedDistribution)
                entries.append({"dict": component.to_dict(omit_embedding=True), "embedding": index})
        shared = []
        for item in self._shared:
            state = item.state_dict()
            shared.append(
                {
                    "table": item.embedding.to_dict(),
                    "lr": item.lr,
                    "optimizer_state": None if state is None else tensors_to_blob(state),
                }
            )
        return {
            "type": "MixtureDistribution",
            "version": 1,
            "weights": self.weights.tolist(),
            "shared_embeddings": shared,
            "components": entries,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], **kwargs: Any) -> MixtureDistribution:
        """Rebuild a mixture from :meth:`to_dict`; components sharing a table share it again.

        Keyword arguments (e.g. ``device=``) go to every component's and table's
        ``from_dict``.

        Raises
        ------
        CheckpointError
            Another version, or a malformed entry.
        """
        require_version(d, "MixtureDistribution dict")
        try:
            shared = [
                SharedEmbedding(
                    CategoricalEmbedding.from_dict(item["table"], **kwargs),
                    float(item["lr"]),
                    item.get("optimizer_state"),
                )
                for item in d["shared_embeddings"]
            ]
            components = []
            for entry in d["components"]:
                index = entry["embedding"]
                extra = {} if index is None else {"embedding": shared[int(index)].embedding}
                components.append(from_dict(entry["dict"], **kwargs, **extra))
            return cls(components, d["weights"], _shared=shared)
        except (KeyError, TypeError, IndexError, ArgumentError) as exc:
            raise CheckpointError(f"MixtureDistribution dict is invalid: {exc!r}") from exc


class MixtureSampler(DistributionSampler):
    """Draws a component ``k`` with probability ``weights[k]``, then an observation from it.

    Component samplers are seeded from the mixture's generator, so equal seeds give
    equal draws. Keyword arguments of :meth:`sample` go to the component's sampler
    (e.g. ``prompt=``/``n_tokens=`` for document leaves).
    """

    def __init__(self, dist: MixtureDistribution, seed: int | None = None) -> None:
        self.dist = dist
        self.rng = sampler_rng(seed)
        self._samplers = part_samplers(dist.components, self.rng)
        self.last_components: np.ndarray = np.empty(0, dtype=np.int64)

    def sample(self, size: int | None = None, **kwargs: Any) -> Any:
        """Draw one observation, or a list of ``size`` (an array when they are scalars).

        ``last_components`` records the component of each draw of the latest call.
        """
        n = 1 if size is None else positive_int("size", size)
        picks = draw_indices(self.dist.weights, n, self.rng)
        self.last_components = picks
        draws = [self._samplers[int(k)].sample(**kwargs) for k in picks]
        if size is None:
            return draws[0]
        if all(isinstance(x, int | float | np.number) for x in draws):
            return np.asarray(draws)
        return draws


@dataclass(frozen=True, slots=True)
class MixtureStatistic:
    """A mixture accumulator's value: responsibility totals and each component's statistic."""

    weights: np.ndarray
    components: tuple[Any, ...]


class MixtureAccumulator(SequenceEncodableStatisticAccumulator):
    """Folds responsibilities (exact totals) and each component's weighted statistic."""

    def __init__(self, factories: Sequence[StatisticAccumulatorFactory]) -> None:
        self.components = [f.make() for f in factories]
        self._weights = ExactSums(len(self.components))

    @property
    def num_components(self) -> int:
        return len(self.components)

    def seq_update_posterior(
        self, enc: Any, weights: Any, posterior: np.ndarray, estimate: MixtureDistribution
    ) -> None:
        """Fold ``enc`` with responsibilities already computed by ``estimate.e_step(enc)``."""
        weights = as_weights(weights, posterior.shape[0])
        component_weights = weights[:, None] * posterior
        self._weights.add_columns(component_weights)
        for k, acc in enumerate(self.components):
            if component_weights[:, k].any():
                acc.seq_update(enc, component_weights[:, k], estimate.components[k])

    def seq_update(self, enc: Any, weights: Any, estimate: Any) -> None:
        """E-step with ``estimate`` (a :class:`MixtureDistribution`), then fold.

        Raises
        ------
        ArgumentTypeError
            ``estimate`` is not a mixture with this many components.
        """
        if (
            not isinstance(estimate, MixtureDistribution)
            or estimate.num_components != self.num_components
        ):
            raise ArgumentTypeError(
                f"`estimate` must be the current MixtureDistribution with {self.num_components} "
                f"components. Got {type(estimate).__name__}."
            )
        w = as_weights(weights, self.acc_to_encoder().encoded_len(enc))
        self.seq_update_posterior(enc, w, estimate.posterior(enc), estimate)

    def update(self, x: Any, weight: float, estimate: Any) -> None:
        self.seq_update(self.acc_to_encoder().seq_encode([x]), np.array([weight]), estimate)

    def seq_initialize(self, enc: Any, weights: Any, rng: np.random.Generator) -> None:
        """Fold with random responsibilities (one uniform Dirichlet draw per observation)."""
        w = as_weights(weights, self.acc_to_encoder().encoded_len(enc))
        resp = rng.dirichlet(np.ones(self.num_components), size=w.shape[0])
        component_weights = w[:, None] * resp
        self._weights.add_columns(component_weights)
        for k, acc in enumerate(self.components):
            acc.seq_initialize(enc, component_weights[:, k], rng)

    def initialize(self, x: Any, weight: float, rng: np.random.Generator) -> None:
        self.seq_initialize(self.acc_to_encoder().seq_encode([x]), np.array([weight]), rng)

    def combine(self, other: Any) -> MixtureAccumulator:
        """Add ``other``'s totals (exactly) and combine component by component."""
        if not isinstance(other, MixtureAccumulator) or other.num_components != self.num_components:
            raise ArgumentTypeError(
                f"can only combine with a MixtureAccumulator of {self.num_components} components. "
                f"Got {type(other).__name__}."
            )
        self._weights.combine(other._weights)
        combine_parts(self.components, other.components, "component")
        return self

    def value(self) -> MixtureStatistic:
        return MixtureStatistic(
            self._weights.floats(), tuple(acc.value() for acc in self.components)
        )

    def from_value(self, v: Any) -> MixtureAccumulator:
        if not isinstance(v, MixtureStatistic) or len(v.components) != self.num_components:
            raise ArgumentTypeError(
                f"`v` must be a MixtureStatistic of {self.num_components} components. Got {type(v).__name__}."
            )
        self._weights.set_floats(as_weights(v.weights, self.num_components, "mixture totals"))
        from_part_values(self.components, v.components)
        return self

    def acc_to_encoder(self) -> DataSequenceEncoder:
        return self.components[0].acc_to_encoder()


class MixtureAccumulatorFactory(PartsAccumulatorFactory[MixtureAccumulator]):
    """Makes mixture accumulators over fresh component accumulators."""

    accumulator = MixtureAccumulator


class MixtureEstimator(ParameterEstimator):
    """EM M-step for a mixture of the families of ``estimators``.

    Parameters
    ----------
    estimators
        ``K >= 1`` component estimators whose accumulators consume the same encoding.
    pseudo_count
        Added to every component's responsibility total when the weights are
        re-estimated (``None``: plain maximum likelihood).
    embedding
        Optional: declare that every component shares this :class:`CategoricalEmbedding`
        (each must hold this very table); sharing is otherwise detected by identity.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        ``K < 1``, a component that is not an estimator or consumes another encoding,
        a component that does not hold the declared shared embedding (or holds one of
        another vocabulary), or sharing experts with different learning rates — each
        naming the component.
    """

    def __init__(
        self,
        estimators: Sequence[ParameterEstimator],
        *,
        pseudo_count: float | None = None,
        embedding: CategoricalEmbedding | None = None,
        _shared: list[SharedEmbedding] | None = None,
    ) -> None:
        self.estimators = _require_components(estimators, ParameterEstimator, "estimators")
        self.pseudo_count = as_pseudo_count(pseudo_count)
        embeddings = [_embedding_of(e) for e in self.estimators]
        tables = _shared_tables(embeddings, self.estimators, embedding)
        self._encoder = _agreeing_encoder(
            [e.accumulator_factory().make().acc_to_encoder() for e in self.estimators],
            self.estimators,
        )
        if _shared is None:
            _shared = [SharedEmbedding(t, _shared_lr(t, self.estimators)) for t in tables]
        self._shared = _shared
        self._holders = [
            next((s for s in self._shared if s.embedding is table), None) for table in embeddings
        ]

    @property
    def num_components(self) -> int:
        return len(self.estimators)

    def accumulator_factory(self) -> MixtureAccumulatorFactory:
        return MixtureAccumulatorFactory([e.accumulator_factory() for e in self.estimators])

    def estimate(self, nobs: float | None, suff_stat: Any) -> MixtureDistribution:
        """Re-estimate the weights and every component (see the module docstring).

        Every live component's statistic is checked before any component steps, so a
        stale one (its revision changed since accumulation) fails without side effects.

        Raises
        ------
        ArgumentError, RevisionMismatchError (and other mixle errors of a component)
            Re-raised with the component named; the responsibility totals and the
            pseudo-count are all zero.
        """
        stat = suff_stat.value() if isinstance(suff_stat, MixtureAccumulator) else suff_stat
        if not isinstance(stat, MixtureStatistic) or len(stat.components) != self.num_components:
            raise ArgumentTypeError(
                f"`suff_stat` must be a MixtureStatistic of {self.num_components} components. "
                f"Got {type(suff_stat).__name__}."
            )
        totals = as_weights(stat.weights, self.num_components, "mixture responsibility totals")
        weights = normalized(totals, self.pseudo_count, "mixture responsibility totals")
        stepping = [
            totals[k] > 0 or not isinstance(e, LiveEstimator) for k, e in enumerate(self.estimators)
        ]
        for k, est in enumerate(self.estimators):
            if stepping[k] and isinstance(est, LiveEstimator):
                with naming_part("component", k, est):
                    est.check(stat.components[k])
        components: list[SequenceEncodableProbabilityDistribution] = []
        contributions: dict[int, list[Any]] = {id(s): [] for s in self._shared}
        for k, est in enumerate(self.estimators):
            holder = self._holders[k]
            with naming_part("component", k, est):
                if not stepping[k]:
                    assert isinstance(est, LiveEstimator)
                    components.append(est.current())
                elif holder is not None:
                    assert isinstance(est, EmbeddingTiedEstimator)
                    contributions[id(holder)].append(est.embedding_gradient(stat.components[k]))
                    components.append(
                        est.estimate(float(totals[k]), stat.components[k], hold=holder.embedding)
                    )
                else:
                    components.append(est.estimate(float(totals[k]), stat.components[k]))
        for shared in self._shared:
            shared.step(contributions[id(shared)])
        return MixtureDistribution(components, weights, _shared=self._shared)
