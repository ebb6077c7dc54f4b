"""``TrainConfig``: every knob of a ``mixle train`` run, declared once, validated once.

Five sections, each a frozen dataclass whose fields carry their flag, help text,
choices and check (:func:`mixle._options.option`); ``mixle train`` builds its flags
from them, so a new knob is one field here: :class:`ModelConfig`, :class:`DataConfig`,
:class:`OptimizerConfig`, :class:`CheckpointConfig` and :class:`RuntimeConfig`.
:class:`TrainConfig` holds one of each; it still takes the flat fields
(``TrainConfig("corpus", d_model=64)``), answers flat attribute access
(``config.d_model``) and writes the flat JSON of checkpoints' ``config.json``.

The fields also split in two groups. *Identity* fields define the trajectory — the
model shape, the data stream, the optimizer — and a checkpoint refuses to resume a
run whose identity differs (:meth:`TrainConfig.identity`). *Run-control* fields (how
long, how often to evaluate or checkpoint, where to write, which device) may change
between a run and its resumption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mixle._checks import exact_int, nonnegative_int, positive_int
from mixle._options import Check, Sectioned, check_options, option, section
from mixle.data._block_schedule import BlockSchedule
from mixle.data._curriculum_bandit import checked_edges
from mixle.data._options import ORDERS
from mixle.data._packing_options import PACKINGS
from mixle.data._vsl_stream import CURRICULA
from mixle.errors import ArgumentError, ArgumentTypeError

__all__ = [
    "LAYOUTS",
    "OBJECTIVES",
    "CheckpointConfig",
    "DataConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RuntimeConfig",
    "TrainConfig",
]

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


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be True or False. Got {value!r} instead.")
    return value


def _string(kind: str) -> Check:
    """A check that a value is a non-empty string; the message says it must be ``kind``."""

    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ArgumentTypeError(f"`{name}` must be {kind}. Got {value!r}.")
        return value

    return check


# Optional paths: None (the default) is not checked.
_optional_str = _string("a non-empty string or None")


def _token_id(name: str, value: Any) -> int:
    result = exact_int(name, value)
    if result < 0:
        raise ArgumentError(f"`{name}` must be a nonnegative token id. Got {result} instead.")
    return result


def length_edges(name: str, value: Any) -> tuple[int, ...]:
    """``"128,512"`` -> ``(128, 512)``: positive, strictly increasing bucket edges."""
    try:
        edges = [int(part) for part in value.split(",")]
    except (AttributeError, ValueError):
        raise ArgumentError(
            f"`{name}` must be comma-separated token counts, e.g. '128,512'. Got {value!r}."
        ) from None
    return checked_edges(name, edges)


def _length_buckets(name: str, value: Any) -> str | None:
    if value is not None:
        length_edges(name, value)
    return value


def _block_schedule(name: str, value: Any) -> str | None:
    if value is not None:
        if not isinstance(value, str):
            raise ArgumentTypeError(
                f"`{name}` must be a string such as '2048:0.9,8192'. Got {value!r}."
            )
        BlockSchedule.parse(value)
    return value


def _unmet(*requirements: tuple[str, object, object]) -> list[str]:
    """``name=value (needs need)`` for each ``(name, value, need)`` whose value is not the
    one an option requires: the body of the "X needs: ..." errors below."""
    return [
        f"{name}={value!r} (needs {need!r})" for name, value, need in requirements if value != need
    ]


def _learning_rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentTypeError(f"`{name}` must be a positive number. Got {value!r} instead.")
    if not (math.isfinite(value) and value > 0):
        raise ArgumentError(f"`{name}` must be a finite positive number. Got {value!r} instead.")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """What the model is trained on, and how the stream is cut into batches.

    Parameters
    ----------
    corpus
        Corpus location: a directory holding ``manifest.json`` or a URL a registered
        storage backend understands.
    mixture
        A mixture file (TOML or JSON, see ``docs/mixtures.md``) to train on instead of
        one corpus; ``corpus`` then only labels the run. Needs ``steps``, the global
        layout and no held-out documents; every source's budget is checked against
        ``steps`` before training. With ``objective="windows"`` every global window is
        drawn from the source the mixture's schedule assigns it (weights are shares
        of windows, i.e. of trained targets).
    objective
        ``"packed"`` (default): :class:`~mixle.data.StreamingCorpus` rows, every
        position predicts the next token, loss masked on padding. ``"windows"``:
        :class:`~mixle.data.stream_token_source.TokenStream` windows, the last position
        predicts the next token.
    layout
        How the stream is split over ranks. ``"global"`` (default): one stream of rows
        (packed) or windows; global batch ``k`` is items ``[k * G, (k + 1) * G)`` with
        ``G = world_size * batch_size``, rank ``r`` takes its contiguous
        ``batch_size``; the checkpoint holds one cursor counting global items, and
        the run resumes with any number of processes and any batch size.
        ``"per-rank"``: packed — each rank packs its round-robin share of documents;
        windows — rank ``r`` takes every ``world_size``-th batch; resumes only with
        the same number of processes and batch size.
    order
        The packed objective's epoch order (``mixle.data.StreamingCorpus``'s
        ``order``): ``"blocks"`` (the global layout's and mixtures' default, planned
        window by window) or ``"permutation"`` (the seed's permutation; the per-rank
        layout's only order). ``None`` (default): the stream's default for a new run,
        and on ``resume`` the order the checkpoint was saved with (a checkpoint from
        before the blocks order resumes with the permutation). Not part of the run
        identity: the data cursor's state names (and checks) it.
    packing
        ``"concatenate"`` (default) or ``"best_fit"`` (packed objective, global layout):
        how documents become rows (docs/streaming.md, "Packing choices"); with
        ``mixture``, every source's rows.
    document_mask
        Confine the model's attention to each document of a packed row (and restart
        its positions there): the rows carry attention boundaries. Packed objective.
    block
        The context length of the batches (and of the model).
    batch_size
        Rows (packed) or windows per step *per rank*. With the global layout it may
        change between a run and its resumption (the stream continues at the same row).
    block_schedule
        Context length per phase (:meth:`~mixle.data.BlockSchedule.parse` syntax,
        ``[BATCHx]BLOCK[:UNTIL],...``, e.g. ``"64:0.9,256"``: block 64 for the first
        90% of the run's tokens, then 256, with the rows per step that keep the tokens
        per global batch; every rank switches at the same step): packed objective,
        either layout, concatenate packing (a mixture's too: every source counts its own
        tokens; the schedule may instead be the mixture file's ``block_schedule``, not
        both); its first block is ``block``, a fraction needs ``steps``. The model is
        built for the largest block. With the per-rank layout each rank's cursor counts
        tokens of its own stream (resume on the same shape; no ``length_buckets``).
    boundary_id
        Token inserted between documents in the stream (``None``: none).
    vsl_buckets, vsl_curriculum
        Variable-sequence-length training (:class:`~mixle.data.VariableLengthStream`):
        ``vsl_buckets`` is the shortest bucket (a power of two up to ``block``, itself
        a power of two); every document is cut into power-of-two pieces and each step
        holds one bucket's pieces, ``world_size * batch_size * block`` tokens over all
        ranks (so ``block / L`` times the rows for bucket ``L``). ``vsl_curriculum`` is
        ``"natural"``, ``"grow_p2"`` or ``"bandit"`` (a :class:`~mixle.data.LengthBandit`
        picks each step's bucket, rewarded as for ``length_buckets``; read-ahead off). Packed objective, global layout, no mixture,
        no boundary token, no ``length_buckets``; the model is built for ``block``.
        The cursor names the curriculum: a checkpoint of another one is refused.
    holdout_documents
        The last this-many documents of the corpus are held out from training and used
        for evaluation (deterministic: no randomness, no reading to decide).
    """

    corpus: str = option(
        check=_string("a non-empty string"), flag=False, help="corpus directory or URL"
    )
    mixture: str | None = option(
        None,
        check=_optional_str,
        metavar="MIX.toml",
        help="train on a weighted mixture of corpora (TOML or JSON file, see "
        "docs/mixtures.md) instead of CORPUS; needs --steps",
    )
    objective: str = option(
        "packed",
        choices=OBJECTIVES,
        help="packed: StreamingCorpus rows, dense masked loss (default); "
        "windows: TokenStream windows, next-token loss",
    )
    layout: str = option(
        "global",
        choices=LAYOUTS,
        help="'global' (default): global batches cut from one stream, so --resume works "
        "with another --nproc_per_node or --batch-size; 'per-rank': each rank's own share "
        "(resume with the same shape only)",
    )
    order: str | None = option(
        None,
        choices=ORDERS,
        help="packed epoch order: 'blocks' (the default of a new run: planned window by "
        "window, O(documents / 4096)) or 'permutation' (the seed's full permutation, "
        "O(documents)); unset, --resume keeps the order the checkpoint was saved with",
    )
    packing: str = option(
        "concatenate",
        choices=PACKINGS,
        help="concatenate (default): the order as one stream cut into rows (documents cut "
        "at row edges); best_fit: windows of the order packed by best-fit decreasing, only "
        "documents longer than a row are cut (packed objective, --layout global)",
    )
    document_mask: bool = option(
        False,
        check=_flag,
        help="attention stays inside each document of a packed row, positions restart "
        "at each document (packed objective)",
    )
    block: int = option(64, check=positive_int, help="context length (default 64)")
    batch_size: int = option(16, check=positive_int, help="rows or windows per step per rank (16)")
    block_schedule: str | None = option(
        None,
        check=_block_schedule,
        metavar="BLOCK:UNTIL,...,BLOCK",
        help="context length per phase, e.g. 64:0.9,256 (block 64 for 90%% of the run's "
        "tokens, then 256; rows per step keep the tokens per step; UNTIL a fraction or a "
        "token count; [BATCHx]BLOCK sets a phase's rows); packed, concatenate",
    )
    boundary_id: int | None = option(
        None, check=_token_id, parse=int, help="token between documents"
    )
    length_buckets: str | None = option(
        None,
        check=_length_buckets,
        metavar="E1,E2,...",
        help="ration documents by length: an EXP3 bandit over the buckets split at these "
        "token counts, rewarded by each bucket's loss decrease per token, rechosen every "
        "epoch (packed objective, permutation order, needs --steps)",
    )
    vsl_buckets: int | None = option(
        None,
        check=positive_int,
        parse=int,
        metavar="MIN",
        help="variable-sequence-length steps: documents cut into power-of-two pieces of "
        "MIN to --block targets, each step one bucket of --batch-size x --block tokens per "
        "rank (packed objective, global layout; docs/streaming.md)",
    )
    vsl_curriculum: str = option(
        "natural",
        choices=CURRICULA,
        help="order of the --vsl-buckets steps: natural (buckets interleaved at random in "
        "proportion, default), grow_p2 (short to long, 8 cycles an epoch, as OLMo-core) or "
        "bandit (an EXP3 bandit picks each step's bucket, rewarded by its loss decrease)",
    )
    holdout_documents: int = option(
        0,
        check=nonnegative_int,
        flag="--holdout",
        metavar="N",
        help="hold out the last N documents for evaluation (default 0)",
    )

    def __post_init__(self) -> None:
        check_options(self)
        if self.order is not None and self.objective != "packed":
            raise ArgumentError(
                "`order` needs objective='packed': windows are shuffled by their own "
                f"bijection. Got objective={self.objective!r}."
            )
        self._check_packing()
        if self.block_schedule is not None:
            self._check_block_schedule()
        self._check_vsl()

    def _check_block_schedule(self) -> None:
        wrong = _unmet(
            ("objective", self.objective, "packed"),
            ("packing", self.packing, "concatenate"),
        )
        first = BlockSchedule.parse(self.block_schedule or "").first_block
        if self.block != first:
            wrong.append(f"block={self.block} (needs the schedule's first block, {first})")
        if self.layout == "per-rank" and self.length_buckets is not None:
            # The per-rank phases count the steps of past epochs, whose orders a
            # length bandit (a stateful selector) does not rebuild.
            wrong.append(
                f"length_buckets={self.length_buckets!r} (needs None with layout='per-rank')"
            )
        if wrong:
            raise ArgumentError(
                f"block_schedule={self.block_schedule!r} needs: {'; '.join(wrong)}."
            )

    def block_schedule_for(self, world_size: int, steps: int | None) -> BlockSchedule | None:
        """The :class:`~mixle.data.BlockSchedule` of ``block_schedule`` for a run of
        ``steps`` steps on ``world_size`` ranks: its fractions are of ``steps x
        world_size x batch_size x block`` tokens (``None`` without a schedule)."""
        if self.block_schedule is None:
            return None
        total = None if steps is None else steps * world_size * self.batch_size * self.block
        return BlockSchedule.parse(self.block_schedule, total_tokens=total)

    @property
    def model_block(self) -> int:
        """The block the model is built for: the largest of the schedule, else ``block``."""
        if self.block_schedule is None:
            return self.block
        return BlockSchedule.parse(self.block_schedule).largest_block

    def _check_vsl(self) -> None:
        if self.vsl_buckets is None:
            if self.vsl_curriculum != "natural":
                raise ArgumentError(
                    f"vsl_curriculum={self.vsl_curriculum!r} needs vsl_buckets (--vsl-buckets)."
                )
            return
        for name, value in (("vsl_buckets", self.vsl_buckets), ("block", self.block)):
            if value & (value - 1):
                raise ArgumentError(
                    f"`{name}` must be a power of two with vsl_buckets. Got {value} instead."
                )
        if self.vsl_buckets > self.block:
            raise ArgumentError(
                f"`vsl_buckets` ({self.vsl_buckets}) must not exceed `block` ({self.block}): "
                "the bucket schedule would name no bucket."
            )
        wrong = _unmet(
            ("objective", self.objective, "packed"),
            ("layout", self.layout, "global"),
            ("mixture", self.mixture, None),
            ("packing", self.packing, "concatenate"),
            ("document_mask", self.document_mask, False),
            ("boundary_id", self.boundary_id, None),
            ("length_buckets", self.length_buckets, None),
            ("order", self.order, None),
            ("block_schedule", self.block_schedule, None),
        )
        if wrong:
            raise ArgumentError(f"vsl_buckets={self.vsl_buckets} needs: {'; '.join(wrong)}.")

    def _check_packing(self) -> None:
        wrong = [
            f"{name}={value!r} (needs {need!r})"
            for name, value, need, applies in (
                ("objective", self.objective, "packed", True),
                ("layout", self.layout, "global", self.packing == "best_fit"),
            )
            if applies and value != need
        ]
        if wrong and (self.packing != "concatenate" or self.document_mask):
            raise ArgumentError(
                f"packing={self.packing!r} with document_mask={self.document_mask} needs: "
                f"{'; '.join(wrong)}."
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """The transformer's shape (see :class:`~mixle.models.CausalTransformerLM`).

    ``vocab`` ``None`` takes the corpus manifest's ``vocab_size``; ``d_model`` must
    be divisible by ``n_head``; ``tie_head`` shares the embedding as output matrix.
    """

    vocab: int | None = option(
        None, check=positive_int, parse=int, help="vocabulary size (default: manifest)"
    )
    d_model: int = option(128, check=positive_int, help="width (default 128)")
    n_layer: int = option(4, check=positive_int, help="blocks (default 4)")
    n_head: int = option(4, check=positive_int, help="attention heads (default 4)")
    tie_head: bool = option(True, check=_flag, flag="--untied-head", help="separate output matrix")

    def __post_init__(self) -> None:
        check_options(self)
        if self.d_model % self.n_head:
            raise ArgumentError(
                f"`d_model` must be divisible by `n_head`. Got d_model={self.d_model}, "
                f"n_head={self.n_head} instead."
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerConfig:
    """The optimizer: a constant AdamW learning rate ``lr``."""

    lr: float = option(3.0e-3, check=_learning_rate, help="AdamW learning rate (3e-3)")

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """Where and how often checkpoints are written, and whether to resume from one.

    Write a checkpoint every ``checkpoint_every`` steps (0: only at the end) under
    ``checkpoint_dir`` (``None``: no checkpoints), keeping the newest ``keep_last``.
    ``resume`` continues from the newest checkpoint in ``checkpoint_dir`` (a fresh
    start if it holds none); without it an existing checkpoint is an error, never
    overwritten.
    """

    checkpoint_dir: str | None = option(None, check=_optional_str, help="directory for checkpoints")
    checkpoint_every: int = option(
        0, check=nonnegative_int, help="checkpoint every N steps (0: at the end)"
    )
    keep_last: int = option(3, check=positive_int, help="checkpoints to keep (3)")
    resume: bool = option(False, check=_flag, help="continue from the newest checkpoint, if any")

    def __post_init__(self) -> None:
        check_options(self)
        if self.resume and self.checkpoint_dir is None:
            raise ArgumentError("`resume` needs `checkpoint_dir` (where the checkpoints are).")
        if self.checkpoint_every and self.checkpoint_dir is None:
            raise ArgumentError(
                f"`checkpoint_every` is {self.checkpoint_every} but `checkpoint_dir` is not set."
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeConfig:
    """How long the run goes, what it evaluates and logs, and where it runs.

    Parameters
    ----------
    steps, epochs
        Stop after ``steps`` optimizer steps in total, or before the first batch of
        epoch ``epochs``, whichever comes first. When both are ``None`` one epoch runs.
    seed
        Seeds the model initialisation, the data shuffle and the global RNGs.
    eval_every, eval_batches
        Evaluate the held-out loss every ``eval_every`` steps (0: never; needs
        ``holdout_documents > 0``) over at most ``eval_batches`` fixed batches.
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
    prefetch
        Batches produced ahead of the step by a background thread (default 2; 0 reads
        each batch on the training thread). Changes no batch and no checkpoint, so it
        is not part of the run's identity and may differ between a run and its resume.
    """

    steps: int | None = option(
        None, check=nonnegative_int, parse=int, help="stop after this many steps"
    )
    epochs: int | None = option(
        None,
        check=nonnegative_int,
        parse=int,
        help="stop at this epoch (default 1 without --steps)",
    )
    seed: int = option(0, check=nonnegative_int, help="init, shuffle and RNG seed (0)")
    device: str = option(
        "cpu", check=_string("a device string"), help="cpu, cuda or cuda:N (default cpu)"
    )
    threads: int | None = option(
        None, check=positive_int, parse=int, help="torch CPU threads per process"
    )
    eval_every: int = option(0, check=nonnegative_int, help="evaluate every N steps (0: off)")
    eval_batches: int = option(8, check=positive_int, help="held-out batches per eval (8)")
    metrics: str | None = option(
        None, check=_optional_str, help="JSONL log (default CHECKPOINT_DIR/metrics.jsonl)"
    )
    plot: str | None = option(
        None, check=_optional_str, help="write a loss-curve PNG here (mixle[plot])"
    )
    log_every: int = option(50, check=nonnegative_int, help="progress line every N steps")
    progress: bool | None = option(
        None,
        check=_flag,
        negation="--no-progress",
        help="force the progress bar on/off (default: on when stderr is a terminal)",
    )
    prefetch: int = option(
        2,
        check=nonnegative_int,
        help="batches read ahead of the step in a background thread (0: none; default 2)",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, init=False)
class TrainConfig(Sectioned):
    """A validated, immutable description of one training run.

    ``TrainConfig(data=DataConfig(corpus=...), model=ModelConfig(...), ...)`` or, as
    before the sections, ``TrainConfig("corpus", d_model=64, steps=100)``: the flat
    fields of every section as keywords (``corpus`` also first positional), a section
    left out taking its defaults. ``config.d_model`` reads ``config.model.d_model``;
    :meth:`to_dict` writes the flat fields, so checkpoints' ``config.json`` keep their
    shape and old ones load. See the sections for the meaning of each field.

    Raises
    ------
    ArgumentError, ArgumentTypeError
        Any field is out of its domain (the message names the field and the value).
    """

    data: DataConfig = section(DataConfig, "data")
    model: ModelConfig = section(ModelConfig, "model")
    optimizer: OptimizerConfig = section(OptimizerConfig, "optimizer")
    runtime: RuntimeConfig = section(RuntimeConfig, "run")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "checkpoints")

    def __post_init__(self) -> None:
        if self.runtime.eval_every and not self.data.holdout_documents:
            raise ArgumentError(
                f"`eval_every` is {self.runtime.eval_every} but `holdout_documents` is 0: hold "
                "out some documents (e.g. --holdout 16) to evaluate on."
            )
        if self.data.mixture is not None:
            self._check_mixture()
        if self.data.length_buckets is not None:
            self._check_length_buckets()
        if self.data.block_schedule is not None and self.runtime.steps is None:
            schedule = BlockSchedule.parse(self.data.block_schedule)
            if any(isinstance(p.until, float) for p in schedule.phases):
                raise ArgumentError(
                    f"block_schedule={self.data.block_schedule!r} ends its phases at fractions "
                    "of the run's tokens: give --steps (or end them at token counts)."
                )

    def block_schedule_for(self, world_size: int) -> BlockSchedule | None:
        """The run's :class:`~mixle.data.BlockSchedule` on ``world_size`` ranks
        (:meth:`DataConfig.block_schedule_for` over the run's ``steps``)."""
        return self.data.block_schedule_for(world_size, self.runtime.steps)

    def _check_length_buckets(self) -> None:
        wrong = [
            f"{name}={value!r} (needs {need})"
            for name, value, bad, need in (
                ("objective", self.objective, self.objective != "packed", "'packed'"),
                ("order", self.order, self.order == "blocks", "'permutation' or unset"),
                ("mixture", self.mixture, self.mixture is not None, "None"),
                ("steps", self.runtime.steps, self.runtime.steps is None, "a number: --steps"),
            )
            if bad
        ]
        if wrong:
            raise ArgumentError(
                f"length_buckets={self.data.length_buckets!r} needs: {'; '.join(wrong)}."
            )

    def _check_mixture(self) -> None:
        wrong = [
            f"{name}={value!r} (needs {need!r})"
            for name, value, need in (
                ("layout", self.data.layout, "global"),
                ("holdout_documents", self.data.holdout_documents, 0),
            )
            if value != need
        ]
        if self.runtime.steps is None:
            wrong.append("steps=None (a mixture is endless: give --steps)")
        if wrong:
            raise ArgumentError(
                f"training on the mixture {self.data.mixture} needs: {'; '.join(wrong)}."
            )

    @property
    def metrics_path(self) -> str | None:
        """Where the JSONL metrics log goes (see ``RuntimeConfig.metrics``)."""
        if self.runtime.metrics is not None:
            return self.runtime.metrics
        if self.checkpoint.checkpoint_dir is not None:
            return f"{self.checkpoint.checkpoint_dir.rstrip('/')}/metrics.jsonl"
        return None

    def identity(self) -> dict[str, Any]:
        """The fields that define the trajectory (a resume must match every one).

        Per-rank layout: exactly the fields of checkpoints written before layouts
        existed (``batch_size`` included, no ``layout``), so those resume with
        ``layout="per-rank"``. Global layout: ``layout`` instead of ``batch_size``, whose
        row cursor continues at the same row with another batch size.
        """
        fields = self.flat()
        drop = "layout" if self.data.layout == "per-rank" else "batch_size"
        return {name: fields[name] for name in _IDENTITY_FIELDS if name != drop}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able flat dict with a ``"version"`` key; :meth:`from_dict` inverts it."""
        return {"version": _CONFIG_VERSION, **self.flat()}

    @classmethod
    def from_dict(cls, d: Any) -> TrainConfig:
        """Rebuild a config from :meth:`to_dict` output (of any mixle release).

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
        unknown = sorted(set(d) - set(cls.option_names()) - {"version"})
        if unknown:
            raise ArgumentError(f"TrainConfig dict has unknown field(s): {', '.join(unknown)}.")
        return cls(**{k: v for k, v in d.items() if k != "version"})
