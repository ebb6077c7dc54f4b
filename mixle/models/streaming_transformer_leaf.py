"""A streaming, non-buffering transformer language-model leaf.

Where a buffering leaf would hold a shard of ``(window, next token)`` observations, this
leaf keeps the corpus out of the accumulator. Each ``seq_update`` computes a weighted
gradient *numerator* at a pinned revision of the model (a SHA-256 digest of its
parameters) without changing the module. ``value()`` returns model-sized gradient sums
plus weighted telemetry — never the data. ``combine()`` adds states only when they were
computed at the identical revision over identical parameters, so partitioned
(data-parallel) and unpartitioned accumulation mean the same thing instead of silently
discarding worker-trained weights. ``estimate()`` applies one AdamW step with the
weighted mean gradient through an optimizer whose state persists across estimates and
through ``to_dict``/``from_dict``. :func:`stream_fit` gives the familiar
one-step-per-micro-batch loop by estimating after every streamed batch.

Determinism: :meth:`StreamingTransformer.from_config` initialises from ``seed``
(default 0) on CPU, so equal seeds give bitwise-equal models on every machine. On CPU
training is bitwise reproducible, including across a ``to_dict``/``from_dict`` round
trip mid-run. CUDA attention kernels may be non-deterministic in the backward pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mixle._checks import nonnegative_int
from mixle.errors import ArgumentError, ArgumentTypeError, RevisionMismatchError
from mixle.models._accumulator import (
    StreamingGradientState,
    StreamingTransformerAccumulator,
    StreamingTransformerAccumulatorFactory,
    check_module,
    model_logits,
    module_embedding,
    trainable_parameters,
)
from mixle.models._documents import StreamingDocumentEncoder, document_rows
from mixle.models._inputs import (
    StreamingTokenEncoder,
    TokenBatch,
    TokenPairs,
    as_contexts,
    as_device,
    as_observation,
    parse_batch,
    positive_float,
)
from mixle.models._revision import revision_digest
from mixle.models._sampler import StreamingTransformerSampler
from mixle.models._transformer import CausalTransformerLM
from mixle.stats.base import (
    ParameterEstimator,
    SequenceEncodableProbabilityDistribution,
)
from mixle.stats.embedding import CategoricalEmbedding
from mixle.stats.registry import (
    from_dict,
    register,
    require_version,
    tensors_from_blob,
    tensors_to_blob,
)
from mixle.stats.tied import OptimizerSlot

__all__ = [
    "StreamingGradientState",
    "StreamingTokenEncoder",
    "StreamingTransformer",
    "StreamingTransformerAccumulator",
    "StreamingTransformerAccumulatorFactory",
    "StreamingTransformerEstimator",
    "StreamingTransformerLeaf",
    "StreamingTransformerLeafEstimator",
    "StreamingTransformerSampler",
    "TransformerLMEstimator",
    "stream_fit",
]

_SCORE_ROWS = 256  # contexts per forward pass when scoring (bounds activation memory)


@register("StreamingTransformer")
class StreamingTransformer(SequenceEncodableProbabilityDistribution):
    """Wraps a live, persistently trained causal LM as a mixle distribution.

    With ``observation="pair"`` (the default) the distribution is conditional: an
    observation is a ``(context, next token)`` pair and ``seq_log_density`` is the
    next-token ``log p``. With ``observation="document"`` an observation is a whole
    document (a 1-D token array) and its log-density is the sum of its next-token
    ``log p``, the document cut into rows of ``block`` predictions (see
    :mod:`mixle.models._documents`), so a mixture can assign whole documents.

    Parameters
    ----------
    module
        The live ``torch.nn.Module`` (see :class:`CausalTransformerLM`); moved to
        ``device`` in place and exposed as :attr:`module`.
    device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; must exist on this machine.
    lr
        AdamW learning rate used by :meth:`estimator`.
    optimizer_state
        An AdamW ``state_dict`` (or its :func:`~mixle.stats.tensors_to_blob` string) to
        continue from; loaded eagerly.
    observation
        ``"pair"`` or ``"document"`` (see above).

    Raises
    ------
    ArgumentError
        Bad ``device``, ``lr`` or ``observation``; ``module`` lacks integer
        ``vocab``/``block``.
    CheckpointError
        ``optimizer_state`` does not fit the module's parameters.
    """

    def __init__(
        self,
        module: nn.Module,
        device: Any = "cpu",
        *,
        lr: float = 3.0e-3,
        optimizer_state: dict[str, Any] | str | None = None,
        observation: str = "pair",
        _slot: OptimizerSlot | None = None,
    ) -> None:
        self.module, self.vocab, self.block = check_module(module)
        self.device = as_device(device)
        self.lr = positive_float("lr", lr)
        self.observation = as_observation(observation)
        self.module.to(self.device)
        if _slot is None:
            if isinstance(optimizer_state, str):
                optimizer_state = tensors_from_blob(optimizer_state, "optimizer state")
            _slot = OptimizerSlot(optimizer_state)
            if optimizer_state is not None:
                _slot.get(_trainable(self.module), self.lr)  # validate eagerly
        self._slot = _slot

    @classmethod
    def from_config(
        cls,
        vocab: int,
        *,
        d_model: int = 128,
        n_layer: int = 4,
        n_head: int = 4,
        block: int = 64,
        embedding: CategoricalEmbedding | None = None,
        device: Any = "cpu",
        seed: int = 0,
        tie_head: bool = True,
        lr: float = 3.0e-3,
        observation: str = "pair",
    ) -> StreamingTransformer:
        """Build the leaf from hyperparameters (no hand-built torch module).

        ``embedding`` optionally shares a :class:`CategoricalEmbedding` across leaves;
        ``seed`` (default 0) fixes the initialisation bitwise on every device;
        ``observation`` is ``"pair"`` or ``"document"``.
        """
        module = CausalTransformerLM(
            vocab,
            d_model=d_model,
            n_layer=n_layer,
            n_head=n_head,
            block=block,
            embedding=embedding,
            tie_head=tie_head,
            seed=seed,
        )
        return cls(module, device, lr=lr, observation=observation)

    @property
    def revision(self) -> str:
        """SHA-256 digest of the module's current parameters."""
        return revision_digest(self.module)

    @property
    def embedding(self) -> CategoricalEmbedding | None:
        """The module's token embedding (``None`` for a module that is not a CausalTransformerLM)."""
        return module_embedding(self.module)

    def _as_pairs(self, enc: Any) -> TokenPairs:
        encoder = StreamingTokenEncoder(self.vocab, self.block)
        if isinstance(enc, TokenPairs):
            return encoder.encode_arrays(enc.contexts, enc.tokens)
        return encoder.seq_encode(enc)

    @torch.inference_mode()
    def _last_logits(self, contexts: np.ndarray) -> torch.Tensor:
        ids = torch.from_numpy(contexts).to(self.device)
        return model_logits(self.module, ids, last_only=True)

    def seq_log_density(self, enc: Any) -> np.ndarray:
        """Return the log-density (float64) of every observation of ``enc``.

        Pairs: ``enc`` is a :class:`TokenPairs` or a sequence of ``(context, token)``
        pairs; each entry is the next-token ``log p``. Documents: ``enc`` is a
        ``TokenDocuments`` or a sequence of 1-D token arrays; each entry is the sum of
        the document's next-token ``log p`` (0 for a one-token document). Scores ``256``
        rows per forward pass.
        """
        if self.observation == "document":
            return self._document_log_density(enc)
        pairs = self._as_pairs(enc)
        out = np.empty(len(pairs), dtype=np.float64)
        for start in range(0, len(pairs), _SCORE_ROWS):
            chunk = pairs[start : start + _SCORE_ROWS]
            logits = self._last_logits(chunk.contexts).double()
            with torch.inference_mode():
                tokens = torch.from_numpy(chunk.tokens).to(self.device)
                logp = F.log_softmax(logits, dim=-1).gather(1, tokens[:, None])[:, 0]
            out[start : start + len(chunk)] = logp.cpu().numpy()
        return out

    @torch.inference_mode()
    def _document_log_density(self, enc: Any) -> np.ndarray:
        docs = StreamingDocumentEncoder(self.vocab).seq_encode(enc)
        rows = document_rows(docs, self.block, np.ones(len(docs)))
        row_sums = np.empty(rows.row_document.shape[0], dtype=np.float64)
        for start in range(0, row_sums.shape[0], _SCORE_ROWS):
            part = slice(start, start + _SCORE_ROWS)
            ids = torch.from_numpy(rows.batch.contexts[part]).to(self.device)
            targets = torch.from_numpy(rows.batch.targets[part]).to(self.device)
            logp = F.log_softmax(model_logits(self.module, ids, last_only=False).double(), dim=-1)
            picked = logp.gather(2, targets[..., None])[..., 0].cpu().numpy()
            row_sums[part] = np.where(rows.batch.weights[part] > 0, picked, 0.0).sum(axis=1)
        return np.bincount(rows.row_document, weights=row_sums, minlength=len(docs))

    def log_density(self, xy: Any) -> float:
        """Return the log-density of one observation (a pair, or a document)."""
        return float(self.seq_log_density([xy])[0])

    def predict(self, x: Any) -> Any:
        """Return argmax next-token predictions.

        ``x`` is one context (1-D, returns an ``int``) or an ``(n, L)`` array of contexts
        with ``L <= block`` (returns ``n`` int64 ids).
        """
        contexts, single = as_contexts(x, self.vocab, self.block)
        out = np.empty(contexts.shape[0], dtype=np.int64)
        for start in range(0, contexts.shape[0], _SCORE_ROWS):
            logits = self._last_logits(contexts[start : start + _SCORE_ROWS])
            out[start : start + logits.shape[0]] = logits.argmax(dim=-1).cpu().numpy()
        return int(out[0]) if single else out

    def batch_loss(self, batch: Any) -> float:
        """Return the weighted (masked) mean next-token NLL, in nats, of one batch.

        Accepts either batch shape of :func:`stream_fit`; nothing is trained.
        """
        parsed = parse_batch(batch, self.vocab, self.block)
        with torch.inference_mode():
            ids = torch.from_numpy(parsed.contexts).to(self.device)
            logits = model_logits(self.module, ids, last_only=not parsed.dense)
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).double(),
                torch.from_numpy(parsed.targets.reshape(-1)).to(self.device),
                reduction="none",
            )
            weights = torch.from_numpy(parsed.weights.reshape(-1)).to(self.device).double()
            total = float(weights.sum())
            if total == 0:
                raise ArgumentError("the batch has no unmasked target; its loss is undefined.")
            return float((nll * weights).sum()) / total

    def sampler(self, seed: int | None = None) -> StreamingTransformerSampler:
        """Return a sampler for the conditional next-token model (see the sampler class)."""
        return StreamingTransformerSampler(self, seed)

    def estimator(self, pseudo_count: float | None = None) -> StreamingTransformerEstimator:
        """Return the estimator that continues training this live module.

        The estimator shares this leaf's optimizer, so training continues with the same
        AdamW moments. ``pseudo_count`` exists for protocol compatibility; a neural leaf
        has no conjugate prior, so anything but ``None`` raises ``ArgumentError``.
        """
        if pseudo_count is not None:
            raise ArgumentError(
                f"`pseudo_count` has no meaning for a transformer leaf; pass None. Got {pseudo_count!r}."
            )
        return StreamingTransformerEstimator(
            self.module, self.lr, self.device, observation=self.observation, _slot=self._slot
        )

    def dist_to_encoder(self) -> StreamingTokenEncoder | StreamingDocumentEncoder:
        """Return the encoder of this leaf's observations (pairs or documents), validating ids."""
        if self.observation == "document":
            return StreamingDocumentEncoder(self.vocab)
        return StreamingTokenEncoder(self.vocab, self.block)

    def to_dict(self, *, omit_embedding: bool = False) -> dict[str, Any]:
        """Serialise module (architecture + weights), device, lr, observation and optimizer state.

        The module must be a :class:`CausalTransformerLM`; its weights and the AdamW
        state travel as weights-only ``torch.save`` blobs. ``omit_embedding=True``
        leaves out the token embedding table (a mixture stores a shared table once);
        :meth:`from_dict` then needs ``embedding=``.
        """
        if not isinstance(self.module, CausalTransformerLM):
            raise ArgumentTypeError(
                f"{type(self.module).__name__} has no to_dict(); only registered modules "
                "(e.g. CausalTransformerLM) can be serialised."
            )
        state = self._slot.state_dict()
        return {
            "type": "StreamingTransformer",
            "version": 1,
            "module": self.module.to_dict(omit_embedding=omit_embedding),
            "device": str(self.device),
            "lr": self.lr,
            "observation": self.observation,
            "optimizer_state": None if state is None else tensors_to_blob(state),
        }

    @classmethod
    def from_dict(
        cls,
        d: dict[str, Any],
        *,
        device: Any = None,
        embedding: CategoricalEmbedding | None = None,
    ) -> StreamingTransformer:
        """Rebuild a leaf from :meth:`to_dict`.

        ``device`` overrides the recorded one; ``embedding`` is the (shared) table for a
        dict written with ``omit_embedding=True``.
        """
        require_version(d, "StreamingTransformer dict")
        target = as_device(d.get("device", "cpu") if device is None else device)
        extra = {} if embedding is None else {"embedding": embedding}
        module = from_dict(d["module"], device=target, **extra)
        return cls(
            module,
            target,
            lr=d["lr"],
            optimizer_state=d.get("optimizer_state"),
            observation=d.get("observation", "pair"),
        )


class StreamingTransformerEstimator(ParameterEstimator):
    """Persistent-optimizer estimator applying foldable worker gradient sums.

    A live estimator (see :mod:`mixle.stats.tied`): ``current()`` is the leaf as it is,
    ``check`` validates a statistic without stepping, and ``estimate(..., hold=table)``
    steps every parameter but a shared embedding table, which a mixture steps once for
    all of its experts.

    Parameters
    ----------
    module
        The live module to train (moved to ``device``).
    lr
        AdamW learning rate (other AdamW settings are torch's defaults:
        betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter).
    device
        Where the module lives and steps run.
    optimizer_state
        An AdamW state dict (or blob string) to continue from.
    observation
        ``"pair"`` or ``"document"``: what the accumulators consume.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: float = 3.0e-3,
        device: Any = "cpu",
        optimizer_state: dict[str, Any] | str | None = None,
        *,
        observation: str = "pair",
        _slot: OptimizerSlot | None = None,
    ) -> None:
        leaf = StreamingTransformer(
            module,
            device,
            lr=lr,
            optimizer_state=optimizer_state,
            observation=observation,
            _slot=_slot,
        )
        self.module, self.device, self.lr = leaf.module, leaf.device, leaf.lr
        self.observation = leaf.observation
        self._slot = leaf._slot

    @property
    def embedding(self) -> CategoricalEmbedding | None:
        """The module's token embedding (shareable across a mixture's experts)."""
        return module_embedding(self.module)

    def accumulator_factory(self) -> StreamingTransformerAccumulatorFactory:
        """Return the factory whose accumulators pin the module's current revision."""
        return StreamingTransformerAccumulatorFactory(
            self.module, self.lr, self.device, self.observation
        )

    def current(self) -> StreamingTransformer:
        """Return the live leaf without taking a step."""
        return StreamingTransformer(
            self.module, self.device, lr=self.lr, observation=self.observation, _slot=self._slot
        )

    def check(self, suff_stat: Any) -> None:
        """Raise as :meth:`estimate` would for a stale, foreign or weightless statistic."""
        self._mean_gradients(suff_stat)

    def embedding_gradient(self, suff_stat: Any) -> tuple[torch.Tensor, float]:
        """Return the embedding table's gradient numerator in ``suff_stat`` and its weight.

        Raises
        ------
        ArgumentError
            The module has no :class:`CategoricalEmbedding`.
        """
        table = self.embedding
        if table is None:
            raise ArgumentError("the module has no CategoricalEmbedding to share.")
        state = (
            suff_stat.value()
            if isinstance(suff_stat, StreamingTransformerAccumulator)
            else suff_stat
        )
        if not isinstance(state, StreamingGradientState):
            raise ArgumentTypeError(
                f"`suff_stat` must be a StreamingGradientState or accumulator. Got {type(suff_stat).__name__}."
            )
        name = next(n for n, p in trainable_parameters(self.module) if p is table.weight)
        return state.gradient_sums[name], state.effective_weight

    def _mean_gradients(self, suff_stat: Any) -> tuple[list[nn.Parameter], list[torch.Tensor]]:
        if isinstance(suff_stat, StreamingTransformerAccumulator):
            if suff_stat.module is not self.module:
                raise ArgumentError("the accumulator was made for a different module.")
            suff_stat.check_pinned()  # same parameters, unchanged since the pin
            return suff_stat.parameters, suff_stat.mean_gradients()
        if not isinstance(suff_stat, StreamingGradientState):
            raise ArgumentTypeError(
                f"`suff_stat` must be a StreamingGradientState or accumulator. Got {type(suff_stat).__name__}."
            )
        params = _trainable(self.module)
        current = revision_digest(self.module)
        if suff_stat.base_sha256 != current:
            raise RevisionMismatchError(
                f"gradient state computed at revision {suff_stat.base_sha256} cannot be applied "
                f"to the module at revision {current}."
            )
        names = tuple(name for name, _ in trainable_parameters(self.module))
        if tuple(suff_stat.parameter_names) != names:
            raise RevisionMismatchError(
                f"gradient state at revision {current} covers parameters "
                f"{list(suff_stat.parameter_names)}, the module has {list(names)}."
            )
        if suff_stat.effective_weight <= 0:
            raise ArgumentError("cannot take a step from zero total weight.")
        grads = [
            suff_stat.gradient_sums[n].to(p.device, p.dtype) / suff_stat.effective_weight
            for n, p in zip(names, params, strict=True)
        ]
        return params, grads

    def estimate(
        self,
        nobs: float | None,
        suff_stat: Any,
        *,
        hold: CategoricalEmbedding | None = None,
    ) -> StreamingTransformer:
        """Apply one AdamW step with the weighted mean gradient; return the live leaf.

        ``suff_stat`` is a :class:`StreamingGradientState` (from ``value()``/``combine``)
        or, equivalently and without hashing, an accumulator over this module. ``nobs``
        is ignored (the state carries its own weight). ``hold`` is a shared embedding
        table to leave untouched (its AdamW moments too): a mixture steps it once itself.

        Raises
        ------
        RevisionMismatchError
            The state was computed at another revision than the module's current one
            (both digests named), or over other parameters.
        ArgumentError
            The state's total weight is 0.
        """
        params, grads = self._mean_gradients(suff_stat)
        optimizer = self._slot.get(params, self.lr)
        held = None if hold is None else hold.weight
        for param, grad in zip(params, grads, strict=True):
            # A parameter whose grad is None is skipped by AdamW: no step, no moment update.
            param.grad = None if param is held else grad
        optimizer.step()
        for param in params:
            param.grad = None
        return self.current()


class TransformerLMEstimator(StreamingTransformerEstimator):
    """A transformer language model as a fit-ready estimator.

    ``TransformerLMEstimator(vocab, d_model=..., ...)`` builds the module from
    hyperparameters (seeded, see :class:`CausalTransformerLM`); ``embedding`` optionally
    ties a shared :class:`CategoricalEmbedding`. ``TransformerLMEstimator(V, embedding=e)``
    and ``StreamingTransformer.from_config(V, embedding=e).estimator()`` build the same
    thing.
    """

    def __init__(
        self,
        vocab: int,
        *,
        d_model: int = 128,
        n_layer: int = 4,
        n_head: int = 4,
        block: int = 64,
        embedding: CategoricalEmbedding | None = None,
        lr: float = 3.0e-3,
        device: Any = "cpu",
        seed: int = 0,
        tie_head: bool = True,
        observation: str = "pair",
    ) -> None:
        leaf = StreamingTransformer.from_config(
            vocab,
            d_model=d_model,
            n_layer=n_layer,
            n_head=n_head,
            block=block,
            embedding=embedding,
            device=device,
            seed=seed,
            tie_head=tie_head,
            lr=lr,
            observation=observation,
        )
        super().__init__(leaf.module, leaf.lr, leaf.device, observation=leaf.observation)


def stream_fit(
    module: nn.Module | StreamingTransformer,
    token_source: Iterable[Any],
    *,
    lr: float = 3.0e-3,
    device: Any = "cpu",
    report_every: int = 200,
    log: Callable[[str], Any] | None = None,
    max_steps: int | None = None,
) -> StreamingTransformer:
    """Train one persistent-optimizer step per streamed micro-batch, buffering nothing.

    Each batch goes accumulator -> estimate, exactly the data-parallel path with one
    partition; the accumulator is handed to ``estimate`` directly, which skips only the
    SHA-256 attestation (the revision is still guarded). Batches are
    ``(context (b, L), next_tokens (b,))`` or ``(context, targets (b, L), loss_mask)``
    (see :func:`mixle.models._inputs.parse_batch`); the loss is the weighted/masked mean
    over all targets of the batch. A batch whose mask is all False is skipped.

    Parameters
    ----------
    module
        A torch module (trained with a new AdamW at ``lr`` on ``device``) or a
        :class:`StreamingTransformer`, which continues with its own optimizer, ``lr``
        and device (``lr``/``device`` are then ignored).
    token_source
        Any iterable of batches; consumed once, lazily.
    report_every
        Call ``log`` every this many steps (0: never) with step, tokens, mean loss over
        the window and tokens/s. Reading the loss synchronises the device only then.
    log
        e.g. ``print``.
    max_steps
        Stop after this many steps (``None``: exhaust ``token_source``).

    Returns
    -------
    StreamingTransformer
        The trained leaf (same live module), carrying the optimizer state.
    """
    leaf = (
        module
        if isinstance(module, StreamingTransformer)
        else StreamingTransformer(module, device, lr=lr)
    )
    every = nonnegative_int("report_every", report_every)
    limit = None if max_steps is None else nonnegative_int("max_steps", max_steps)
    if log is not None and not callable(log):
        raise ArgumentTypeError(f"`log` must be callable or None. Got {type(log).__name__}.")
    estimator = leaf.estimator()
    factory = estimator.accumulator_factory()
    steps = tokens = window_tokens = 0
    window_loss: Any = 0.0
    window_weight = 0.0
    started = time.perf_counter()
    for batch in token_source if limit != 0 else ():
        parsed: TokenBatch = parse_batch(batch, leaf.vocab, leaf.block)
        observed = int(np.count_nonzero(parsed.weights))
        if observed == 0:
            continue
        accumulator = factory.make()
        accumulator.accumulate(parsed)
        leaf = estimator.estimate(None, accumulator)
        steps += 1
        tokens += observed
        window_tokens += observed
        window_loss = window_loss + accumulator.loss_tensor()
        window_weight += accumulator.effective_weight
        if log is not None and every and steps % every == 0:
            elapsed = max(time.perf_counter() - started, 1e-9)
            log(
                f"step {steps} | tokens {tokens} | loss {float(window_loss) / window_weight:.4f} "
                f"| {window_tokens / elapsed:.0f} tok/s"
            )
            window_loss, window_weight, window_tokens = 0.0, 0.0, 0
            started = time.perf_counter()
        if limit is not None and steps >= limit:
            break
    return leaf


def _trainable(module: nn.Module) -> list[nn.Parameter]:
    return [p for _, p in trainable_parameters(module)]


StreamingTransformerLeaf = StreamingTransformer
"""Alias of :class:`StreamingTransformer`."""

StreamingTransformerLeafEstimator = StreamingTransformerEstimator
"""Alias of :class:`StreamingTransformerEstimator`."""
