"""``TrainConfig``: every knob of a ``mixle train`` run, validated once, JSON round-trip.

The fields split in two groups. *Identity* fields define the trajectory — the model
shape, the data stream, the optimizer — and a checkpoint refuses to resume a run whose
identity differs (:meth:`TrainConfig.identity`). *Run-control* fields (how long, how
often to evaluate or checkpoint, where to write, which device) may change between a run
and its resumption.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from mixle._checks import exact_int, nonnegative_int, positive_int
from mixle.data._packing_options import PACKINGS
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = ["LAYOUTS", "OBJECTIVES", "TrainConfig"]

OBJECTIVES = ("packed", "windows")
LAYOUTS = ("global", "per-rank")
_CONFIG_VERSION = 1

# Fields that define the training trajectory; a resume must match them exactly.
_IDENTITY_FIELDS = (
    "objective",
    "vocab",
    "d_model",
    "n_layer",
    "n_head",
    "block",
    "tie_head",
    "batch_size",
    "layout",
    "lr",
    "seed",
    "boundary_id",
    "holdout_documents",
)


def _optional(name: str, value: Any, check: Any) -> Any:
    return None if value is None else check(name, value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be True or False. Got {value!r} instead.")
    return value


def _optional_str(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ArgumentTypeError(f"`{name}` must be a non-empty string or None. Got {value!r}.")
    return value


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """A validated, immutable description of one training run.

    Parameters
    ----------
    corpus
        Corpus location: a directory holding ``manifest.json`` or a URL a registered
        storage backend understands.
    objective
        ``"packed"`` (default): :class:`~mixle.data.StreamingCorpus` rows, every
        position predicts the next token, loss masked on padding. ``"windows"``:
        :class:`~mixle.data.stream_token_source.TokenStream` windows, the last position
        predicts the next token.
    vocab
        Vocabulary size; ``None`` takes the corpus manifest's ``vocab_size``.
    d_model, n_layer, n_head, block, tie_head
        Transformer shape (see :class:`~mixle.models.CausalTransformerLM`). ``block``
        is also the context length of the batches.
    batch_size
        Rows (packed) or windows per step *per rank*. With the global layout it may
        change between a run and its resumption (the stream continues at the same row).
    layout
        How the stream is split over ranks. ``"global"`` (default): one stream of rows
        (packed) or windows; global batch ``k`` is items ``[k * G, (k + 1) * G)`` with
        ``G = world_size * batch_size``, rank ``r`` takes its contiguous
        ``batch_size``; the checkpoint holds one cursor counting global items, and
        the run resumes with any number of processes and any batch size.
        ``"per-rank"``: packed — each rank packs its round-robin share of documents;
        windows — rank ``r`` takes every ``world_size``-th batch; resumes only with
        the same number of processes and batch size.
    lr
        Constant AdamW learning rate.
    steps, epochs
        Stop after ``steps`` optimizer steps in total, or before the first batch of
        epoch ``epochs``, whichever comes first. When both are ``None`` one epoch runs.
    seed
        Seeds the model initialisation, the data shuffle and the global RNGs.
    boundary_id
        Token inserted between documents in the stream (``None``: none).
    holdout_documents
        The last this-many documents of the corpus are held out from training and used
        for evaluation (deterministic: no randomness, no reading to decide).
    eval_every, eval_batches
        Evaluate the held-out loss every ``eval_every`` steps (0: never; needs
        ``holdout_documents > 0``) over at most ``eval_batches`` fixed batches.
    checkpoint_dir, checkpoint_every, keep_last
        Write a checkpoint every ``checkpoint_every`` steps (0: only at the end) under
        ``checkpoint_dir`` (``None``: no checkpoints), keeping the newest ``keep_last``.
    resume
        Continue from the newest checkpoint in ``checkpoint_dir`` (a fresh start if it
        holds none). Without it an existing checkpoint is an error, never overwritten.
    device
        ``"cpu"``, ``"cuda"``, ``"cuda:N"``. Under torchrun with ``"cuda"`` each rank
        uses ``cuda:LOCAL_RANK``.
    threads
        ``torch.set_num_threads`` value (``None``: leave torch's default). Bitwise
        reproducibility on CPU needs the same value across a run and its resumptions.
    metrics
        JSONL metrics log path; ``None`` puts it at ``checkpoint_dir/metrics.jsonl``
        (or writes none when there is no checkpoint directory either).
    plot
        Write a loss-curve PNG here at the end (needs matplotlib: ``mixle[plot]``).
    log_every
        Print a progress line every this many steps (0: never).
    progress
        Show a tqdm bar: ``None`` shows it only when stderr is a terminal.
    mixture
        A mixture file (TOML or JSON, see ``docs/mixtures.md``) to train on instead of
        one corpus; ``corpus`` then only labels the run. Needs ``steps``, the global
        layout and no held-out documents; every source's budget is checked against
        ``steps`` before training. With ``objective="windows"`` every global window is
        drawn from the source the mixture's schedule assigns it (weights are shares
        of windows, i.e. of trained targets).
    prefetch
        Batches produced ahead of the step by a background thread (default 2; 0 reads
        each batch on the training thread). Changes no batch and no checkpoint, so it
        is not part of the run's identity and may differ between a run and its resume.
    packing
        ``"concatenate"`` (default) or ``"best_fit"`` (packed objective, global layout):
        how documents become rows (docs/streaming.md, "Packing choices").
    document_mask
        Confine the model's attention to each document of a packed row (and restart
        its positions there): the rows carry attention boundaries. Packed objective.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        Any field is out of its domain (the message names the field and the value).
    """

    corpus: str
    objective: str = "packed"
    vocab: int | None = None
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    block: int = 64
    tie_head: bool = True
    batch_size: int = 16
    layout: str = "global"
    lr: float = 3.0e-3
    steps: int | None = None
    epochs: int | None = None
    seed: int = 0
    boundary_id: int | None = None
    holdout_documents: int = 0
    eval_every: int = 0
    eval_batches: int = 8
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_last: int = 3
    resume: bool = False
    device: str = "cpu"
    threads: int | None = None
    metrics: str | None = None
    plot: str | None = None
    log_every: int = 50
    progress: bool | None = None
    mixture: str | None = None
    prefetch: int = 2
    packing: str = "concatenate"
    document_mask: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus:
            raise ArgumentTypeError(f"`corpus` must be a non-empty string. Got {self.corpus!r}.")
        if self.objective not in OBJECTIVES:
            raise ArgumentError(
                f"`objective` must be one of {', '.join(OBJECTIVES)}. Got {self.objective!r} instead."
            )
        _optional("vocab", self.vocab, positive_int)
        if self.layout not in LAYOUTS:
            raise ArgumentError(
                f"`layout` must be one of {', '.join(LAYOUTS)}. Got {self.layout!r} instead."
            )
        fields = self._values()
        for name in ("d_model", "n_layer", "n_head", "block", "batch_size", "eval_batches"):
            positive_int(name, fields[name])
        if self.d_model % self.n_head:
            raise ArgumentError(
                f"`d_model` must be divisible by `n_head`. Got d_model={self.d_model}, "
                f"n_head={self.n_head} instead."
            )
        _flag("tie_head", self.tie_head)
        _flag("resume", self.resume)
        if isinstance(self.lr, bool) or not isinstance(self.lr, int | float):
            raise ArgumentTypeError(f"`lr` must be a positive number. Got {self.lr!r} instead.")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ArgumentError(f"`lr` must be a finite positive number. Got {self.lr!r} instead.")
        object.__setattr__(self, "lr", float(self.lr))
        _optional("steps", self.steps, nonnegative_int)
        _optional("epochs", self.epochs, nonnegative_int)
        nonnegative_int("seed", self.seed)
        _optional("boundary_id", self.boundary_id, exact_int)
        if self.boundary_id is not None and self.boundary_id < 0:
            raise ArgumentError(
                f"`boundary_id` must be a nonnegative token id. Got {self.boundary_id} instead."
            )
        for name in (
            "holdout_documents",
            "eval_every",
            "checkpoint_every",
            "log_every",
            "prefetch",
        ):
            nonnegative_int(name, fields[name])
        positive_int("keep_last", self.keep_last)
        _optional("threads", self.threads, positive_int)
        if self.eval_every and not self.holdout_documents:
            raise ArgumentError(
                f"`eval_every` is {self.eval_every} but `holdout_documents` is 0: hold out "
                "some documents (e.g. --holdout 16) to evaluate on."
            )
        for name in ("checkpoint_dir", "metrics", "plot"):
            _optional_str(name, fields[name])
        if not isinstance(self.device, str) or not self.device:
            raise ArgumentTypeError(f"`device` must be a device string. Got {self.device!r}.")
        if self.resume and self.checkpoint_dir is None:
            raise ArgumentError("`resume` needs `checkpoint_dir` (where the checkpoints are).")
        if self.checkpoint_every and self.checkpoint_dir is None:
            raise ArgumentError(
                f"`checkpoint_every` is {self.checkpoint_every} but `checkpoint_dir` is not set."
            )
        if self.progress is not None:
            _flag("progress", self.progress)
        if self.mixture is not None:
            self._check_mixture()
        self._check_packing()

    def _check_packing(self) -> None:
        if self.packing not in PACKINGS:
            raise ArgumentError(
                f"`packing` must be one of {', '.join(PACKINGS)}. Got {self.packing!r} instead."
            )
        _flag("document_mask", self.document_mask)
        wrong = [
            f"{name}={value!r} (needs {need!r})"
            for name, value, need, applies in (
                ("objective", self.objective, "packed", True),
                ("layout", self.layout, "global", self.packing == "best_fit"),
                ("mixture", self.mixture, None, True),
            )
            if applies and value != need
        ]
        if wrong and (self.packing != "concatenate" or self.document_mask):
            raise ArgumentError(
                f"packing={self.packing!r} with document_mask={self.document_mask} needs: "
                f"{'; '.join(wrong)}."
            )

    def _check_mixture(self) -> None:
        _optional_str("mixture", self.mixture)
        wrong = [
            f"{name}={value!r} (needs {need!r})"
            for name, value, need in (
                ("layout", self.layout, "global"),
                ("holdout_documents", self.holdout_documents, 0),
            )
            if value != need
        ]
        if self.steps is None:
            wrong.append("steps=None (a mixture is endless: give --steps)")
        if wrong:
            raise ArgumentError(
                f"training on the mixture {self.mixture} needs: {'; '.join(wrong)}."
            )

    def _values(self) -> dict[str, Any]:
        # Shallow: dataclasses.asdict would deep-copy every value.
        return {field.name: self.__getattribute__(field.name) for field in dataclasses.fields(self)}

    @property
    def metrics_path(self) -> str | None:
        """Where the JSONL metrics log goes (see ``metrics``)."""
        if self.metrics is not None:
            return self.metrics
        if self.checkpoint_dir is not None:
            return f"{self.checkpoint_dir.rstrip('/')}/metrics.jsonl"
        return None

    def identity(self) -> dict[str, Any]:
        """The fields that define the trajectory (a resume must match every one).

        Per-rank layout: exactly the fields of checkpoints written before layouts
        existed (``batch_size`` included, no ``layout``), so those resume with
        ``layout="per-rank"``. Global layout: ``layout`` instead of ``batch_size``, whose
        row cursor continues at the same row with another batch size.
        """
        fields = self._values()
        drop = "layout" if self.layout == "per-rank" else "batch_size"
        identity = {name: fields[name] for name in _IDENTITY_FIELDS if name != drop}
        # Only when not the default, so checkpoints written before these existed resume.
        if self.packing != "concatenate":
            identity["packing"] = self.packing
        if self.document_mask:
            identity["document_mask"] = True
        return identity

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with a ``"version"`` key; :meth:`from_dict` inverts it."""
        return {"version": _CONFIG_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: Any) -> TrainConfig:
        """Rebuild a config from :meth:`to_dict` output.

        Raises
        ------
        ArgumentError
            ``d`` is not a dict, has another version, or names unknown fields.
        """
        if not isinstance(d, dict):
            raise ArgumentTypeError(f"TrainConfig.from_dict needs a dict. Got {type(d).__name__}.")
        if d.get("version") != _CONFIG_VERSION:
            raise ArgumentError(
                f"TrainConfig dict version must be {_CONFIG_VERSION}. Got {d.get('version')!r} instead."
            )
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields - {"version"})
        if unknown:
            raise ArgumentError(f"TrainConfig dict has unknown field(s): {', '.join(unknown)}.")
        return cls(**{k: v for k, v in d.items() if k != "version"})
