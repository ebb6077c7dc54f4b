"""``mixle where`` at scale: one document over 10 epochs, fresh process (issue #29 item 3).

Builds a ``--documents`` corpus (default 10^8 documents of 1..7 uint16 tokens, through
the bulk writer ``CorpusWriter.add_flat``: :func:`tools.bench_plan_scale.build_corpus`)
under ``--workdir`` and times, each in a *fresh process* (``python -m mixle.cli where
CORPUS DOC --epochs E --json``, global layout, 8 ranks x 8 rows of 128 tokens), wall
and CPU time (user + system, of the child) of

- ``baseline``: ``mixle where --help`` (the interpreter, numpy and the command's
  imports: the floor every command pays);
- ``blocks``: the default order (inverted: O(window) per epoch);
- ``permutation``: the seed's permutation order (one pass over each epoch's order),
  ``--permutation-rounds`` times (it is slow at 10^8).

Rounds interleave the three; figures are medians. Bytecode is cached in
``--workdir/pycache`` and warmed first (an installed package has its ``.pyc``; this
repository's environment sets ``PYTHONDONTWRITEBYTECODE``). The run also checks,
with ``python -X importtime``, that the command imports no torch, and that both
orders list the same number of sightings for the document (one per epoch at least).
The corpus is deleted at the end unless ``--keep``.

Usage::

    python -m tools.bench_where                                  # 10^8 documents
    python -m tools.bench_where --documents 1000000 --rounds 2   # short
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

from tools.bench_plan_scale import build_corpus

ROOT = Path(__file__).resolve().parents[1]
STREAM = ["--layout", "global", "--block", "128", "--batch-size", "8", "--world-size", "8"]


def _environment(workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of ``command`` in a fresh process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def _imports_torch(command: list[str], env: dict[str, str]) -> bool:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command[1:]],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return any(line.split("|")[-1].strip().startswith("torch") for line in done.stderr.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10**8)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--permutation-rounds", type=int, default=1)
    parser.add_argument("--workdir", default="/tmp/where")
    parser.add_argument("--keep", action="store_true", help="keep the corpus (and reuse it)")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    corpus = workdir / f"corpus-{args.documents}"
    if not (corpus / "manifest.json").exists():
        shutil.rmtree(corpus, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        seconds = build_corpus(corpus, args.documents, seed=0)
        print(f"built {args.documents:,} documents with add_flat in {seconds:.0f} s")
    env = _environment(workdir)
    document = str(args.documents // 3 + 7)
    where = [sys.executable, "-m", "mixle.cli", "where", str(corpus), document]
    where += ["--epochs", str(args.epochs), "--json", *STREAM]
    commands = {
        "baseline": [sys.executable, "-m", "mixle.cli", "where", "--help"],
        "blocks": [*where, "--order", "blocks"],
        "permutation": [*where, "--order", "permutation"],
    }
    try:
        _timed(commands["blocks"], env)  # compile and cache the bytecode
        torch = _imports_torch(commands["blocks"], env)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        found: dict[str, int] = {}
        for round_ in range(args.rounds):
            names = ["baseline", "blocks"]
            if round_ < args.permutation_rounds:
                names.append("permutation")
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                wall, cpu, out = _timed(commands[name], env)
                samples[name].append((wall, cpu))
                if name != "baseline":
                    report = json.loads(out)
                    found[name] = len(report["documents"][0]["sightings"])
    finally:
        if not args.keep:
            shutil.rmtree(corpus, ignore_errors=True)
    medians = {
        name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for name, runs in samples.items()
        if runs
    }
    base_cpu = medians["baseline"][1]
    print(
        f"mixle where, document {document} of {args.documents:,}, {args.epochs} epochs, "
        f"fresh process, medians of {args.rounds} rounds (permutation: "
        f"{args.permutation_rounds}); torch imported: {'yes' if torch else 'no'}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print("| command | wall s | CPU s | CPU / baseline | sightings |")
    print("|---|---|---|---|---|")
    for name, (wall, cpu) in medians.items():
        rows = found.get(name, "")
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {cpu / base_cpu:.2f} | {rows} |")
    if "permutation" in medians:
        ratio = medians["permutation"][1] / medians["blocks"][1]
        print(f"permutation / blocks CPU: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
