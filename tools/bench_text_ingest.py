"""Benchmark text ingestion against the tokenizer's own ``encode_batch`` (issue #29, item 4).

Real text, nothing downloaded: the Python sources of this interpreter's standard
library (one document per file), a byte-level BPE of ``--vocab`` ids trained on them in
this run with Hugging Face ``tokenizers``, written as

* ``docs.jsonl`` (one ``{"text": ...}`` record per document), and
* ``text/`` (one ``.txt`` file per document, ingested whole).

Every round, in alternating order, in fresh processes:

* ``encode_batch``: the tokenizer alone over the same texts, in batches of 1,024, with
  one thread (``RAYON_NUM_THREADS=1``: what one ingest worker's core can do); the
  baseline;
* ``encode_batch_fast``: the same without character offsets (what ingest calls, since
  ``tokenizers`` 0.20), to show how much of ingest's lead is that call;
* ``mixle ingest … --tokenizer tokenizer.json --workers 1`` and ``--workers 2``, for
  the JSONL and the plain-text input.

Ingest runs with ``--unit-size`` (default 4 MiB) so that the input makes several units
for the two workers to share. Reported: tokens/s (median of the rounds, wall time,
tokens from the manifest), the CPU time of each (the encoding loop's for
``encode_batch``; the whole ingest process and its workers for ingest), tokens per CPU
second, the load average, and the two ratios the issue targets: ingest with one worker
over ``encode_batch`` (>= 0.8x) and two workers over one (>= 1.7x), each also per CPU
second (which a shared machine's load does not bend: 2 workers at 1.0x per CPU second
add no work by splitting, so they scale with the free cores).

    python -m tools.bench_text_ingest                 # ~40 MB of text, 3 rounds
    python -m tools.bench_text_ingest --quick         # smoke run, seconds

Inputs and outputs live under ``--dir`` (tmpfs by default, so page-cache eviction
cannot favour one side) and are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# One BPE pass per worker core: the tokenizer's own pool would otherwise spread each
# worker over every core and the per-worker figure would measure the machine instead.
_ONE_THREAD = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

_ENCODE = """
import json, sys, time
import tokenizers
texts = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
tokenizer = tokenizers.Tokenizer.from_file(sys.argv[1])
start, cpu = time.perf_counter(), time.process_time()
tokens = 0
encode = getattr(tokenizer, sys.argv[3])
for first in range(0, len(texts), 1024):
    for encoding in encode(texts[first:first + 1024], add_special_tokens=False):
        tokens += len(encoding.ids)
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"tokens": tokens, "wall": wall, "cpu": cpu}))
"""


def collect_texts(megabytes: float) -> list[str]:
    """The standard library's ``.py`` files, sorted by path, until ``megabytes`` of UTF-8."""
    budget = int(megabytes * 1e6)
    texts: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip():
            texts.append(text)
            budget -= len(text.encode("utf-8"))
        if budget <= 0:
            break
    return texts


def train_tokenizer(texts: list[str], vocab: int, path: Path) -> None:
    """A byte-level BPE of ``vocab`` ids trained on ``texts``, saved as ``tokenizer.json``."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.save(str(path))


def write_inputs(texts: list[str], directory: Path) -> tuple[Path, Path]:
    """Write ``docs.jsonl`` and ``text/NNNNNN.txt`` holding the same documents."""
    jsonl = directory / "docs.jsonl"
    with open(jsonl, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}) + "\n")
    text_dir = directory / "text"
    text_dir.mkdir()
    for number, text in enumerate(texts):
        (text_dir / f"{number:06d}.txt").write_text(text, encoding="utf-8")
    return jsonl, text_dir


def _timed(command: list[str]) -> tuple[float, float, str]:
    """Run ``command`` with one tokenizer thread; return (wall s, child CPU s, stdout)."""
    before = os.times()
    start = time.perf_counter()
    result = subprocess.run(
        command,
        env=dict(os.environ, **_ONE_THREAD, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = os.times()
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, result.stdout


def run_encode(tokenizer: Path, jsonl: Path, method: str = "encode_batch") -> dict[str, float]:
    """``method`` (``encode_batch`` or ``encode_batch_fast``) alone: tokens, and the
    encoding loop's own wall and CPU time."""
    _, _, out = _timed([sys.executable, "-c", _ENCODE, str(tokenizer), str(jsonl), method])
    figures = json.loads(out)
    return {"tokens": figures["tokens"], "wall": figures["wall"], "cpu": figures["cpu"]}


def run_ingest(
    source: Path, output: Path, tokenizer: Path, workers: int, unit_size: str
) -> dict[str, float]:
    """``mixle ingest`` of ``source`` into ``output``: tokens, wall and CPU time (the
    whole process and its workers: start-up, reading, tokenizing, writing, commit)."""
    command = [
        sys.executable,
        "-m",
        "mixle.cli",
        "ingest",
        str(source),
        str(output),
        "--overwrite",
        "--tokenizer",
        str(tokenizer),
        "--workers",
        str(workers),
        "--unit-size",
        unit_size,
        "--quiet",
    ]
    if source.suffix == ".jsonl":
        command += ["--field", "text"]
    wall, cpu, _ = _timed(command)
    manifest = json.loads((output / "manifest.json").read_text())
    shutil.rmtree(output)
    return {"tokens": manifest["num_tokens"], "wall": wall, "cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=40.0, help="text to ingest (MB)")
    parser.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary size")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--dir", default="/dev/shm/mixle-text-bench", help="work directory")
    parser.add_argument(
        "--unit-size",
        default="4MiB",
        help="ingest --unit-size: small enough that the input makes several units for two "
        "workers to share (the default 64MiB would make one of ~40 MB)",
    )
    parser.add_argument("--quick", action="store_true", help="4 MB, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.megabytes, args.rounds = 4.0, 1
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        texts = collect_texts(args.megabytes)
        tokenizer = work / "tokenizer.json"
        train_tokenizer(texts[: max(1, len(texts) // 4)], args.vocab, tokenizer)
        jsonl, text_dir = write_inputs(texts, work)
        size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        print(f"{len(texts)} documents, {size:.1f} MB of text, BPE of {args.vocab} ids")
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        runs: dict[str, list[dict[str, float]]] = {}
        out, unit = work / "out", args.unit_size
        kinds = {
            "encode_batch (1 thread)": lambda: run_encode(tokenizer, jsonl),
            "encode_batch_fast (1 thread)": lambda: run_encode(
                tokenizer, jsonl, "encode_batch_fast"
            ),
            "ingest jsonl, 1 worker": lambda: run_ingest(jsonl, out, tokenizer, 1, unit),
            "ingest jsonl, 2 workers": lambda: run_ingest(jsonl, out, tokenizer, 2, unit),
            "ingest text, 1 worker": lambda: run_ingest(text_dir, out, tokenizer, 1, unit),
            "ingest text, 2 workers": lambda: run_ingest(text_dir, out, tokenizer, 2, unit),
        }
        for round_ in range(args.rounds):
            names = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
            for name in names:
                runs.setdefault(name, []).append(kinds[name]())
        rate = {
            name: statistics.median(r["tokens"] / r["wall"] for r in results)
            for name, results in runs.items()
        }
        per_cpu = {
            name: statistics.median(r["tokens"] / r["cpu"] for r in results)
            for name, results in runs.items()
        }
        print(f"\n{'method':<26} {'M tokens/s':>11} {'wall s':>8} {'CPU s':>8} {'M tok/CPU s':>12}")
        for name, results in runs.items():
            wall = statistics.median(r["wall"] for r in results)
            cpu = statistics.median(r["cpu"] for r in results)
            print(
                f"{name:<26} {rate[name] / 1e6:>11.3f} {wall:>8.2f} {cpu:>8.2f} "
                f"{per_cpu[name] / 1e6:>12.3f}"
            )
        base, base_cpu = rate["encode_batch (1 thread)"], per_cpu["encode_batch (1 thread)"]
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print()
        for source in ("jsonl", "text"):
            one, two = rate[f"ingest {source}, 1 worker"], rate[f"ingest {source}, 2 workers"]
            one_cpu = per_cpu[f"ingest {source}, 1 worker"]
            two_cpu = per_cpu[f"ingest {source}, 2 workers"]
            print(
                f"{source}: 1 worker / encode_batch = {one / base:.2f}x wall, "
                f"{one_cpu / base_cpu:.2f}x per CPU second (target >= 0.8x); "
                f"2 workers / 1 worker = {two / one:.2f}x wall (target >= 1.7x), "
                f"{two_cpu / one_cpu:.2f}x per CPU second (1.0 = no work added by splitting)"
            )
            fast_cpu = per_cpu["encode_batch_fast (1 thread)"]
            print(
                f"{source}: 1 worker / encode_batch_fast = {one_cpu / fast_cpu:.2f}x per CPU "
                f"second; CPU s per M tokens: 1 worker {1e6 / one_cpu:.2f}, 2 workers "
                f"{1e6 / two_cpu:.2f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
