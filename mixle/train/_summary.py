"""``TrainSummary``: what one :func:`mixle.train.train` call did."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["TrainSummary", "mean_or_none"]


def mean_or_none(values: list[float]) -> float | None:
    """Arithmetic mean, or ``None`` for no values."""
    return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class TrainSummary:
    """What a :func:`train` call did (returned on every rank; rank 0 prints it).

    ``first_loss``/``final_loss`` are means over the first/last ``w`` steps of the whole
    trajectory (across resumes), ``w = max(1, min(20, steps // 10))``; ``tokens_per_second`` counts every
    rank's targets over the time spent in training steps (not evaluation or
    checkpoints) of this process.
    """

    start_step: int
    step: int
    tokens: int
    total_tokens: int
    seconds: float
    tokens_per_second: float
    first_loss: float | None
    final_loss: float | None
    eval_loss: float | None
    stopped: str
    resumed_from: str | None
    checkpoint: str | None
    metrics: str | None
    plot: str | None
    world_size: int
    mixture: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """A few human-readable lines."""
        steps = self.step - self.start_step
        lines = [
            f"trained {steps} step(s) ({self.start_step} -> {self.step}, stopped: {self.stopped}) "
            f"on {self.world_size} rank(s): {self.tokens:,} tokens in {self.seconds:.1f} s, "
            f"{self.tokens_per_second:,.0f} tokens/s"
        ]
        if self.first_loss is not None and self.final_loss is not None:
            lines.append(f"train loss {self.first_loss:.4f} -> {self.final_loss:.4f} nats/token")
        if self.eval_loss is not None:
            lines.append(f"held-out loss {self.eval_loss:.4f} nats/token")
        for name, account in (self.mixture or {}).items():
            lines.append(
                f"source {name}: {account['tokens']:,} tokens, share {account['share']:.4f} "
                f"(target {account['target']:.4f}), {account['rows']:,} rows, "
                f"epoch(s) started {account['epochs']}"
            )
        for label, value in (
            ("resumed from", self.resumed_from),
            ("checkpoint", self.checkpoint),
            ("metrics", self.metrics),
            ("plot", self.plot),
        ):
            if value is not None:
                lines.append(f"{label}: {value}")
        return "\n".join(lines)
