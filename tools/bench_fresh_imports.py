"""Benchmark fresh-process import cost of the read path, this tree vs a baseline tree.

Each measurement is one fresh ``python`` child (bytecode cached, as in an installed
package) with ``PYTHONPATH`` set to a tree and the tree's root as working directory (``-c``
puts it first on ``sys.path``): ``python -c pass`` (the interpreter floor);
``import mixle.corpus``; ``import mixle.corpus, mixle.data``; ``open_corpus(path)[0]``
plus the first :class:`~mixle.data.StreamingCorpus` batch of a small generated corpus;
``mixle show --help`` and ``mixle where --help``. The trees are interleaved round by
round; the figures are medians of the child's CPU seconds (user + system) and wall
seconds. The three library commands of this tree also assert, in the child, that none
of ``fsspec``, ``pyarrow``, ``zarr``, ``s3fs``, ``tokenizers``, ``tqdm`` or ``torch``
was loaded.

    python -m tools.bench_fresh_imports --baseline /tmp/lazy/base   # HEAD before the change
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mixle.corpus import CorpusWriter

ROOT = str(Path(__file__).resolve().parents[1])

_FIRST_BATCH = (
    "import sys; from mixle.corpus import open_corpus; from mixle.data import StreamingCorpus;"
    "docs = open_corpus(sys.argv[1]); docs[0];"
    "next(iter(StreamingCorpus(docs, rank=0, world_size=1, block=64, batch_size=4)))"
)
_HEAVY = ("fsspec", "pyarrow", "zarr", "s3fs", "tokenizers", "tqdm", "torch")
_CHECK = f"; import sys; assert not {{m.split('.')[0] for m in sys.modules}} & set({_HEAVY!r})"


def _commands(corpus: str, check: bool) -> dict[str, list[str]]:
    tail = _CHECK if check else ""
    python = [sys.executable, "-c"]
    return {
        "python -c pass": [*python, "pass"],
        "import mixle.corpus": [*python, "import mixle.corpus" + tail],
        "import mixle.corpus, mixle.data": [*python, "import mixle.corpus, mixle.data" + tail],
        "open_corpus(path)[0] + first batch": [*python, _FIRST_BATCH + tail, corpus],
        "mixle show --help": [sys.executable, "-m", "mixle.cli", "show", "--help"],
        "mixle where --help": [sys.executable, "-m", "mixle.cli", "where", "--help"],
    }


def _fresh(command: list[str], tree: str) -> tuple[float, float]:
    """Wall and CPU seconds of one child process running ``command`` against ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = tree
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _corpus(path: Path) -> str:
    if not (path / "manifest.json").exists():
        rng = np.random.default_rng(0)
        lengths = rng.integers(1, 200, size=20_000)
        with CorpusWriter(path, dtype=np.uint16) as writer:
            writer.add_flat(rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16), lengths)
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a tree to compare with (PYTHONPATH)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default="/tmp/lazy/bench")
    parser.add_argument("--json", help="also write the medians here")
    args = parser.parse_args()
    corpus = _corpus(Path(args.work) / "corpus")
    trees = {"baseline": args.baseline, "this tree": ROOT}
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for kind in order:
            for label, command in _commands(corpus, check=kind == "this tree").items():
                samples.setdefault((label, kind), []).append(_fresh(command, trees[kind]))
    print(f"medians of {args.rounds} fresh processes; CPU = user + system of the child")
    figures: dict[str, dict[str, float]] = {}
    print(f"{'command':38} {'baseline CPU':>12} {'this CPU':>9} {'ratio':>6} {'this wall':>9}")
    for label in _commands(corpus, check=False):
        base = statistics.median(cpu for _, cpu in samples[(label, "baseline")])
        this = statistics.median(cpu for _, cpu in samples[(label, "this tree")])
        wall = statistics.median(wall for wall, _ in samples[(label, "this tree")])
        figures[label] = {"baseline_cpu_s": base, "cpu_s": this, "wall_s": wall}
        print(
            f"{label:38} {base * 1e3:9.0f} ms {this * 1e3:6.0f} ms {this / base:6.2f} {wall:8.3f}s"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
