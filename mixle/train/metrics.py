"""The JSONL metrics log and the loss-curve plot of a training run.

One JSON object per line, each with a ``"type"`` and the global ``"step"`` it refers to:

``start``       a process began (or resumed) at ``step``
``step``        one optimizer step: ``loss`` (global masked mean, nats), ``tokens``
                (targets trained on, all ranks), ``total_tokens``, ``tokens_per_s``,
                ``data_wait_s`` (waiting for the batch), ``step_s`` (the whole step),
                ``batches`` (per rank: ``[epoch, index, sha256-prefix]`` of the batch)
``eval``        held-out ``loss`` and ``tokens``
``checkpoint``  a checkpoint was published at ``path``
``end``         the run finished: the summary

On resume the log is cut back to the records with ``step <=`` the checkpoint's step
(rewritten atomically), so it always describes exactly one trajectory: an interrupted
and resumed run produces the same ``step`` records as an uninterrupted one, except for
timings. A line torn by a crash is dropped. Lines are flushed as they are written.
The log is read through :func:`mixle._file_checks.open_regular`: a FIFO or a device
at its path is refused at once (never a blocking ``open``), and a line is parsed
only up to :data:`MAX_LINE_BYTES`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from mixle._file_checks import open_regular
from mixle._io import atomic_write
from mixle._optional import install_hint
from mixle.errors import ArgumentError

__all__ = ["MAX_LINE_BYTES", "MetricsLog", "plot_losses", "read_metrics"]


#: Longest line of a metrics log that is parsed (records are a few hundred bytes);
#: a longer one is skipped like a torn line.
MAX_LINE_BYTES = 1 << 20


def read_metrics(path: str) -> list[dict[str, Any]]:
    """Every well-formed record of the log at ``path`` (a torn last line is skipped).

    A missing log has none.

    Raises
    ------
    ArgumentError
        ``path`` is not a regular file (a FIFO, a device, a directory): it is
        opened without blocking and refused before any read.
    """
    return list(_records(path))


def _records(path: str) -> Iterator[dict[str, Any]]:
    try:
        handle = open_regular(path, ArgumentError)
    except ArgumentError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return
        raise ArgumentError(f"metrics log {exc}") from exc
    with handle:
        while line := handle.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES:
                while line and not line.endswith(b"\n"):  # skip the rest of it
                    line = handle.readline(MAX_LINE_BYTES)
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                yield record


class MetricsLog:
    """Append-only JSONL log (or an in-memory one when ``path`` is ``None``).

    Keeps the ``step`` and ``eval`` losses in memory too (for the plot and summary).
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.losses: list[tuple[int, float]] = []
        self.eval_losses: list[tuple[int, float]] = []
        self._handle: TextIO | None = None

    def restart_at(self, step: int) -> None:
        """Keep only records with ``step <=`` the given step (a fresh run passes 0).

        Rewrites the file atomically (temporary file, fsync, rename, directory fsync) and reloads the
        kept losses into memory.
        """
        self.losses.clear()
        self.eval_losses.clear()
        if self.path is None:
            return
        kept = [r for r in _records(self.path) if _step_of(r) <= step] if step else []
        for record in kept:
            self._remember(record)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        with atomic_write(self.path, "w") as handle:
            for record in kept:
                handle.write(json.dumps(record, sort_keys=True) + "\n")

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (and flush it)."""
        self._remember(record)
        if self.path is None:
            return
        if self._handle is None:
            self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")
        self._handle.flush()

    def _remember(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "step" and isinstance(record.get("loss"), float | int):
            self.losses.append((int(record["step"]), float(record["loss"])))
        elif kind == "eval" and isinstance(record.get("loss"), float | int):
            self.eval_losses.append((int(record["step"]), float(record["loss"])))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _step_of(record: dict[str, Any]) -> int:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _check_matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ArgumentError(
            f"`--plot` needs matplotlib, which is not installed: {install_hint('plot')}."
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def require_plotting() -> None:
    """Raise :class:`ArgumentError` with an install hint if matplotlib is missing."""
    _check_matplotlib()


def plot_losses(
    path: str,
    losses: list[tuple[int, float]],
    eval_losses: list[tuple[int, float]],
    *,
    title: str = "mixle train",
) -> str:
    """Write a PNG of the training loss (raw and smoothed) and held-out loss by step.

    Raises
    ------
    ArgumentError
        matplotlib is not installed (the message says how to install it).
    """

    def draw(axes: Any) -> None:
        if losses:
            steps = [s for s, _ in losses]
            values = [v for _, v in losses]
            axes.plot(steps, values, color="#9ecae1", linewidth=0.8, label="train (per step)")
            window = max(1, len(values) // 50)
            smooth = [
                sum(values[max(0, i - window + 1) : i + 1])
                / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))
            ]
            axes.plot(
                steps, smooth, color="#08519c", linewidth=1.6, label=f"train (mean of {window})"
            )
        if eval_losses:
            axes.plot(
                [s for s, _ in eval_losses],
                [v for _, v in eval_losses],
                "o-",
                color="#d94801",
                markersize=3,
                label="held-out",
            )
        axes.set_ylabel("loss (nats / token)")

    return plot_figure(path, draw, title=title)


def plot_figure(path: str, draw: Callable[[Any], None], *, title: str) -> str:
    """Write a PNG of one by-step chart: ``draw(axes)`` adds the lines and the y label.

    Raises
    ------
    ArgumentError
        matplotlib is not installed (the message says how to install it).
    """
    plt = _check_matplotlib()
    figure, axes = plt.subplots(figsize=(7, 4), dpi=110)
    draw(axes)
    axes.set_xlabel("step")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
