"""Benchmark ``mixle show`` of a 10^8-document corpus's run, each call a fresh process.

Setup (untimed, once per ``--work``): a corpus of ``--documents`` documents of 1..7
tokens (mean 4, uint16) written with ``CorpusWriter.add_flat``; a real ``mixle train``
run on it (``train(...)`` with ``steps=1``: a tiny model, block 64, batch 4, its
checkpoint written by the trainer); and a *late* run, the same run's checkpoint moved
to step ``--late-step`` by the real checkpoint code (``write_checkpoint`` with the
rebuilt source's own state at that step), so steps deep into an epoch can be shown.

Timed, ``--rounds`` rounds, the commands interleaved round by round, each a fresh
``python`` process (bytecode cached, as in an installed package): a baseline that
only starts Python and imports numpy; ``mixle show RUN --step 1``; ``mixle show LATE
--step S`` for a step just before the late checkpoint (placed from the start of the
run and checked against the checkpoint's cursor) and the late step itself; and
``mixle show CORPUS --step S --world-size 8`` with the stream options on the command
line, at a step of epoch 0 and one of epoch ``--epochs - 1``. Each with ``--json`` and
``--tokenizer bytes``. Wall and CPU (user + system of the child) medians, and every
child checked to have run without importing torch.

    python -m tools.bench_show                            # 10^8 documents
    python -m tools.bench_show --documents 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter, open_corpus
from mixle.provenance import RunSpec, resolve_run
from mixle.train import TrainConfig, train
from mixle.train._sources import StreamSource
from mixle.train.checkpoint import read_meta, read_rank_state, write_checkpoint

ROOT = str(Path(__file__).resolve().parent.parent)
BLOCK, BATCH = 64, 4
# Runs the CLI, then fails when torch was imported on the way.
_CHILD = (
    "import sys; from mixle.cli import main; code = main(sys.argv[1:]); "
    "sys.exit(3 if 'torch' in sys.modules else code)"
)


def _write_corpus(path: Path, documents: int) -> None:
    rng = np.random.default_rng(0)
    chunk = 1 << 22
    with CorpusWriter(path, vocab_size=50_257, durable=False) as writer:
        for first in range(0, documents, chunk):
            lengths = rng.integers(1, 8, min(chunk, documents - first), dtype=np.int64)
            tokens = rng.integers(0, 50_257, int(lengths.sum()), dtype=np.int64)
            writer.add_flat(tokens.astype(np.uint16), lengths)


def _train_run(corpus: Path, run: Path) -> None:
    config = TrainConfig(
        str(corpus),
        steps=1,
        d_model=32,
        n_layer=1,
        n_head=2,
        block=BLOCK,
        batch_size=BATCH,
        threads=1,
        checkpoint_dir=str(run),
        log_every=0,
        progress=False,
        prefetch=0,
    )
    train(config, log=lambda _: None)


def _late_run(run: Path, late: Path, step: int) -> None:
    """``late``: ``run``'s checkpoint moved to ``step`` by ``write_checkpoint``."""
    checkpoint = resolve_run(str(run)).record
    assert checkpoint is not None
    config = TrainConfig.from_dict(checkpoint.meta["config"])
    spec = RunSpec(config.data, seed=config.seed, world_size=1)  # unbounded: no last step
    source = spec.source(0)
    assert isinstance(source, StreamSource)
    cursor = spec.cursor_at(step + 1)
    source.stream.seek(*cursor)
    meta = read_meta(checkpoint.checkpoint)
    rank = read_rank_state(checkpoint.checkpoint, meta, 0)
    progress = {"total_tokens": step * BLOCK * BATCH, "cursor": list(cursor)}
    write_checkpoint(
        str(late),
        step,
        rank=0,
        world_size=1,
        rank_state={"stream": source.state_dict(), "rng": rank["rng"]},
        tensors={"model": {}, "optimizer": None},
        meta={"identity": meta["identity"], "config": meta["config"], "progress": progress},
    )


def _fresh(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child process running ``command``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000_000)
    parser.add_argument("--late-step", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=3, help="the corpus step's epoch + 1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default="/tmp/show/bench")
    parser.add_argument("--keep", action="store_true", help="keep the corpus (else deleted)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    work = Path(args.work)
    corpus, run, late = work / "corpus", work / "run", work / "late"
    if not (corpus / "manifest.json").exists() or len(open_corpus(corpus)) != args.documents:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        began = time.perf_counter()
        _write_corpus(corpus, args.documents)
        print(f"corpus: {args.documents:,} documents in {time.perf_counter() - began:.0f} s")
        _train_run(corpus, run)
        _late_run(run, late, args.late_step)
    tokens = open_corpus(corpus).num_tokens
    per_epoch = tokens // (BLOCK * BATCH * 8)  # global steps of 8 ranks, about
    late_epoch_step = (args.epochs - 1) * per_epoch + per_epoch // 2
    python = [sys.executable]
    show = [*python, "-c", _CHILD, "show"]
    stream = ["--block", str(BLOCK), "--batch-size", str(BATCH), "--world-size", "8"]
    text = ["--json", "--tokenizer", "bytes"]
    cases = {
        "python + numpy (baseline)": [*python, "-c", "import numpy"],
        "run, step 1": [*show, str(run), "--step", "1", *text],
        f"late run, step {args.late_step - 1}": [
            *[*show, str(late), "--step", str(args.late_step - 1)],
            *text,
        ],
        f"late run, step {args.late_step}": [
            *show,
            str(late),
            "--step",
            str(args.late_step),
            *text,
        ],
        f"corpus, 8 ranks, step {per_epoch // 2} (epoch 0)": [
            *[*show, str(corpus), "--step", str(per_epoch // 2)],
            *stream,
            *text,
        ],
        f"corpus, 8 ranks, step {late_epoch_step} (epoch {args.epochs - 1})": [
            *[*show, str(corpus), "--step", str(late_epoch_step)],
            *stream,
            *text,
        ],
    }
    for command in cases.values():
        _fresh(command)  # warm the bytecode cache and the page cache
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for round_ in range(args.rounds):
        names = list(cases) if round_ % 2 == 0 else list(reversed(cases))
        for name in names:
            samples[name].append(_fresh(cases[name]))
    base_cpu = statistics.median(c for _, c in samples["python + numpy (baseline)"])
    print(
        f"mixle show, fresh processes: {args.documents:,} documents, {tokens:,} tokens, "
        f"block {BLOCK}, batch {BATCH}; {args.rounds} rounds, medians"
    )
    print(f"{'case':<48} {'wall s':>8} {'cpu s':>8} {'cpu / baseline':>15}")
    figures = {}
    for name, values in samples.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        figures[name] = {"wall_s": wall, "cpu_s": cpu, "cpu_ratio": cpu / base_cpu}
        print(f"{name:<48} {wall:>8.2f} {cpu:>8.2f} {cpu / base_cpu:>15.2f}")
    print("torch imported by no mixle show process (checked in every child)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
