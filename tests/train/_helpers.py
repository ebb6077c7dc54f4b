"""Helpers for the training tests: small learnable corpora, runs, bitwise comparisons."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixle.corpus import CorpusWriter, open_corpus
from mixle.train import TrainConfig, read_metrics
from mixle.train._sources import make_source
from tests._torchrun import ROOT, launch_env

# The environment of a launched CLI or torchrun job (see tests/_torchrun.py).
cli_env = launch_env

_SUBJECTS = ["the cat", "a dog", "my bird", "the old fox", "one fish", "her horse"]
_VERBS = ["sees", "chases", "likes", "finds", "jumps over", "sleeps near"]
_OBJECTS = ["the mat", "a red ball", "the river", "some bread", "the tall tree", "a box"]


def write_text_corpus(path: Path, documents: int = 96, seed: int = 0) -> Path:
    """A byte-level corpus (vocab 256) of templated English sentences: easy to learn."""
    rng = np.random.default_rng(seed)
    with CorpusWriter(path, vocab_size=256, shard_max_bytes=4096) as writer:
        for _ in range(documents):
            sentences = [
                f"{_SUBJECTS[rng.integers(6)]} {_VERBS[rng.integers(6)]} {_OBJECTS[rng.integers(6)]}."
                for _ in range(int(rng.integers(2, 9)))
            ]
            text = " ".join(sentences).capitalize() + "\n"
            writer.add(np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64))
    return path


def write_mixture(
    directory: Path, *, documents: tuple[int, int], seed: int, extra: str = ""
) -> Path:
    """``directory/mix.toml`` over two new text corpora: ``big`` (weight 0.75) and
    ``small`` (0.25), of ``documents`` documents each; ``extra`` is appended (phases)."""
    write_text_corpus(directory / "big", documents=documents[0], seed=seed)
    write_text_corpus(directory / "small", documents=documents[1], seed=seed + 1)
    path = directory / "mix.toml"
    path.write_text(
        '[[source]]\nname = "big"\npath = "big"\nweight = 0.75\n\n'
        '[[source]]\nname = "small"\npath = "small"\nweight = 0.25\n' + extra
    )
    return path


def tiny_config(corpus: Path, **changes: Any) -> TrainConfig:
    """A model that takes a few milliseconds per step on one thread."""
    base: dict[str, Any] = {
        "corpus": str(corpus),
        "d_model": 32,
        "n_layer": 1,
        "n_head": 2,
        "block": 32,
        "batch_size": 4,
        "lr": 3e-3,
        "threads": 1,
        "log_every": 0,
        "progress": False,
    }
    base.update(changes)
    return TrainConfig(**base)


def step_records(metrics: Path) -> list[tuple[Any, ...]]:
    """``(step, loss, tokens, batches)`` of every step record: the trajectory, no timings."""
    return [
        (r["step"], r["loss"], r["tokens"], r["total_tokens"], r["batches"])
        for r in read_metrics(str(metrics))
        if r["type"] == "step"
    ]


def final_tensors(checkpoint_dir: Path) -> dict[str, Any]:
    from mixle.train import latest_checkpoint

    path = latest_checkpoint(str(checkpoint_dir))
    assert path is not None, f"no checkpoint in {checkpoint_dir}"
    return dict(torch.load(os.path.join(path, "model.pt"), weights_only=True))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}/"))
        return out
    if isinstance(value, list | tuple):
        out = {}
        for index, item in enumerate(value):
            out.update(_flat(item, f"{prefix}{index}/"))
        return out
    return {prefix: value}


def assert_bitwise_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Model and optimizer state dicts equal bit for bit (tensors compared as bytes)."""
    fa, fb = _flat(a), _flat(b)
    assert fa.keys() == fb.keys()
    for key in fa:
        x, y = fa[key], fb[key]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape, key
            assert x.detach().cpu().numpy().tobytes() == (y.detach().cpu().numpy().tobytes()), (
                f"{key} differs"
            )
        else:
            assert x == y, key


def last_step(metrics: Path) -> int:
    steps = [r["step"] for r in read_metrics(str(metrics)) if r.get("type") == "step"]
    return steps[-1] if steps else 0


def _descendants(pid: int) -> list[int]:
    """``pid`` and every live descendant (Linux ``/proc``): torchrun starts each worker in a
    session of its own, so killing the launcher's process group would orphan them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def _signal_tree(pid: int, sig: int) -> None:
    for target in _descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)


def run_until(
    command: list[str], metrics: Path, kill_at: int | None, sig: int, timeout: float = 120.0
) -> tuple[int, bool]:
    """Run ``command``; send ``sig`` to it and all its descendants at once when the metrics
    log shows step ``kill_at`` (the whole job dies, as on a node failure).
    Returns ``(returncode, killed)``."""
    output_path = metrics.parent.with_suffix(".out")
    start = output_path.stat().st_size if output_path.exists() else 0
    with open(output_path, "ab") as sink:
        process = subprocess.Popen(
            command,
            env=cli_env(),
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    killed = False
    try:
        while process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{command} did not finish in {timeout} s")
            if kill_at is not None and not killed and last_step(metrics) >= kill_at:
                if sig == 9:
                    _signal_tree(process.pid, sig)
                else:  # a graceful stop goes to the launcher, which forwards it
                    os.kill(process.pid, sig)
                killed = True
            time.sleep(0.005)
    finally:
        if process.poll() is None:
            _signal_tree(process.pid, 9)
        process.wait()
    output = output_path.read_bytes()[start:].decode(errors="replace")
    if process.returncode not in (0, -sig, 128 + sig) or (process.returncode and not killed):
        raise AssertionError(f"{command} exited {process.returncode}:\n{output[-4000:]}")
    return process.returncode, killed


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "mixle.cli", "train", *args]


def packed_source(corpus: Path) -> Any:
    """The packed batch source over ``corpus`` (block 32, batch 4, seed 0), one rank."""
    return make_source(
        "packed",
        open_corpus(corpus),
        rank=0,
        world_size=1,
        block=32,
        batch_size=4,
        seed=0,
        boundary_id=None,
    )
