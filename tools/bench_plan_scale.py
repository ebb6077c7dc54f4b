"""Plans at scale: open + first batch at a mid-epoch cursor, fresh process, no plan store
(issue #25 items 4 and the targets).

Corpora:

- on disk, ``--disk`` sizes (default 10^7, 10^8): synthetic corpora of documents of 1..7
  uint16 tokens (mean 4) written under ``--workdir`` through the writer's bulk path
  ``CorpusWriter.add_flat`` (``build_corpus``; the build time is printed), each deleted
  after it is measured unless ``--keep``;
- virtual, ``--virtual`` sizes (default 10^10, 10^11):
  :class:`mixle.testing.VirtualDocuments` (lengths and tokens hashed from the index,
  nothing on disk; its ``lengths`` refuse, so a plan that asked for one value per
  document would fail the run).

For each corpus and each order (``permutation``: the seed's ``RandomState`` permutation,
O(documents), skipped above ``--permutation-limit`` documents and projected linearly
from the largest size measured, as the issue's table does; ``blocks``: the hierarchical
order of #25, at its defaults or ``--block-documents`` / ``--window-blocks``) a *fresh Python process* (imports done before the clock
starts) opens the corpus, builds a global-layout ``StreamingCorpus`` (rank 3 of 8, rows of
``--block`` tokens, ``--batch-size`` rows per rank), loads a state at the middle of epoch
0 and takes the first batch; it reports wall and CPU time of open (corpus +
stream) and of load + first batch, then a second *seek* (``load_state_dict`` of a state
at another row, once the epoch's totals are known) and that seek with its batch (the
new window built, its rows gathered), private memory
(``RssAnon``) and peak RSS.

Then, for the largest disk corpus (``blocks`` order):

- **memory after 10,000 batches**: a fresh process streams ``--stream-batches`` batches
  from a quarter of the epoch and reports ``RssAnon`` after the first batch and after the
  last (with the figure for the smallest disk corpus beside it: the target is within 10%
  and < 256 MB);
- **killed and resumed**: process U streams 30 batches from the middle of the epoch and
  hashes batches 10..29; process A streams from the same cursor, writes its
  ``state_dict`` after 10 batches, streams 10 more and kills itself (SIGKILL); a fresh
  process B loads A's state and hashes its next 20 batches: B's digest must equal U's;

with ``--sidecar-rounds R``, **open + first batch with and without the block-offsets
sidecar** (``docs/format.md`` section 16; corpora of 2^24 documents or more are built
with one): the same shard files hard-linked beside a manifest that names none, each at
the default window and at ``window_blocks=16``, R interleaved rounds of fresh
processes after one warm-up round (``--only-sidecar``: just this);

for the largest virtual corpus, the **plan memory of the epoch** (``RssAnon`` growth from
the open stream to after the first batch, which holds the epoch's block order and
totals and one window); and with ``--mixture N`` a two-source ``Mixture`` (weights 0.5
each) over two N-document disk corpora (built, measured, deleted), fresh process, no
plan store.

Usage::

    python -m tools.bench_plan_scale --disk 10000000 --virtual 10000000000     # short
    python -m tools.bench_plan_scale --workdir /work/scratch/plan-scale \\
        --disk 10000000,100000000,1000000000 --virtual 10000000000,100000000000 \\
        --mixture 500000000
    python -m tools.bench_plan_scale --workdir /tmp/scale --disk 1000000000 --keep \\
        --only-sidecar --sidecar-rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.format.block_offsets import BLOCK_OFFSETS_KEY
from mixle.corpus.format.manifest import Manifest, write_manifest
from mixle.data import Mixture, MixtureSource, StreamingCorpus
from mixle.testing import VirtualDocuments
from tools._memory import peak_rss_mb, rss_anon_mb

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 50_257
_BUILD_CHUNK = 1 << 23  # documents per add_flat call (~32M tokens, 64 MB of uint16)
ORDERS = ("permutation", "blocks")


def build_corpus(path: Path, documents: int, seed: int) -> float:
    """Write ``documents`` synthetic documents (1..7 uint16 tokens each) to ``path``
    through ``CorpusWriter.add_flat``, one call per 2^23 documents; return the seconds."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    with CorpusWriter(path, vocab_size=VOCAB, durable=False) as writer:
        for first in range(0, documents, _BUILD_CHUNK):
            count = min(_BUILD_CHUNK, documents - first)
            lengths = rng.integers(1, 8, count, dtype=np.int64)
            writer.add_flat(rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.uint16), lengths)
    return time.perf_counter() - start


def _label(count: int) -> str:
    """``10^9`` for a power of ten, else the count with separators."""
    power = len(str(count)) - 1
    return f"10^{power}" if count == 10**power else f"{count:,}"


def _open(source: dict[str, Any]) -> Any:
    if source["kind"] == "virtual":
        return VirtualDocuments(source["documents"], lengths_limit=0)
    return open_corpus(source["path"])


def _digest(batches: list[tuple[np.ndarray, ...]]) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        for array in batch:
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    return (time.perf_counter() - start[0]) * 1e3, (time.process_time() - start[1]) * 1e3


def _rows(num_tokens: int, block: int) -> int:
    """Rows of an epoch of the global layout: ``block + 1`` tokens at stride ``block``."""
    return max(-(-(num_tokens - 1) // block), 0)


def _stream(spec: dict[str, Any]) -> tuple[Any, int]:
    """The opened stream (or mixture) of ``spec`` and the rows of one of its epochs."""
    options = {"block": spec["block"], "batch_size": spec["batch_size"], "rank": 3, "world_size": 8}
    if spec["kind"] == "mixture":
        sources = [MixtureSource(_open(s), 0.5, f"s{k}") for k, s in enumerate(spec["sources"])]
        mixture = Mixture(sources, **options)
        return mixture, 2 * _rows(sources[0].documents.num_tokens, spec["block"])
    documents = _open(spec["source"])
    if spec["order"] == "blocks":
        options |= {
            "block_documents": spec["block_documents"],
            "window_blocks": spec["window_blocks"],
        }
    stream = StreamingCorpus(documents, layout="global", order=spec["order"], **options)
    return stream, _rows(documents.num_tokens, spec["block"])


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One fresh-process measurement (see the module docstring); runs in the child."""
    result: dict[str, Any] = {}
    start = _clock()
    stream, rows = _stream(spec)
    result["open"] = _since(start)
    base_anon = rss_anon_mb()
    size = spec["batch_size"] * 8
    state = stream.state_dict()
    state["row"] = int(rows * spec["cursor"]) // size * size
    start = _clock()
    stream.load_state_dict(state)
    batches = iter(stream)
    first = next(batches)
    result["first"] = _since(start)
    result["anon_first"] = rss_anon_mb()
    result["plan_anon"] = result["anon_first"] - base_anon
    if spec.get("seek"):
        state["row"] = int(rows * 0.8) // size * size
        start = _clock()
        stream.load_state_dict(state)
        result["seek"] = _since(start)
        next(iter(stream))
        result["seek_batch"] = _since(start)
        stream.load_state_dict({**state, "row": int(rows * spec["cursor"]) // size * size})
        batches = iter(stream)
        next(batches)
    produced = [first]
    for k in range(1, spec.get("batches", 1)):
        if k == spec.get("save_at"):
            Path(spec["state_file"]).write_text(json.dumps(stream.state_dict()))
        if k == spec.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        produced.append(next(batches))
    result["digest"] = _digest(produced[spec.get("digest_from", 0) :])
    result["anon_last"] = rss_anon_mb()
    result["peak_rss"] = peak_rss_mb()
    return result


def resumed(spec: dict[str, Any]) -> dict[str, Any]:
    """A fresh process that loads the saved state and hashes its next batches."""
    stream, _ = _stream(spec)
    stream.load_state_dict(json.loads(Path(spec["state_file"]).read_text()))
    batches = iter(stream)
    return {"digest": _digest([next(batches) for _ in range(spec["batches"])])}


def _fresh(mode: str, spec: dict[str, Any]) -> dict[str, Any] | None:
    """Run ``mode`` in a fresh interpreter; its JSON result, or ``None`` if it was killed."""
    completed = subprocess.run(
        [sys.executable, "-m", "tools.bench_plan_scale", f"--{mode}", json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if completed.returncode == -signal.SIGKILL:
        return None
    if completed.returncode:
        raise RuntimeError(f"{mode} {spec} failed:\n{completed.stderr[-4000:]}")
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


def _row(label: str, order: str, figures: dict[str, Any]) -> str:
    (open_wall, open_cpu), (first_wall, first_cpu) = figures["open"], figures["first"]
    nan = (float("nan"), float("nan"))
    seek, seek_batch = figures.get("seek", nan), figures.get("seek_batch", nan)
    return (
        f"| {label} | {order} | {open_wall:.0f} / {open_cpu:.0f} | {first_wall:.0f} / "
        f"{first_cpu:.0f} | {open_wall + first_wall:.0f} | {seek[0]:.2f} / {seek[1]:.2f} | "
        f"{seek_batch[0]:.1f} / {seek_batch[1]:.1f} | {figures['anon_first']:.0f} | "
        f"{figures['peak_rss']:.0f} |"
    )


def _spec(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    return {
        "block": args.block,
        "batch_size": args.batch_size,
        "block_documents": args.block_documents,
        "window_blocks": args.window_blocks,
        "cursor": 0.5,
        **fields,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/work/scratch/plan-scale"))
    parser.add_argument("--disk", default="10000000,100000000", help="disk corpus sizes")
    parser.add_argument("--virtual", default="10000000000,100000000000", help="virtual sizes")
    parser.add_argument("--mixture", type=int, default=0, help="documents per mixture source")
    parser.add_argument("--permutation-limit", type=int, default=100_000_000)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=1, help="rows per rank (8 ranks)")
    parser.add_argument("--stream-batches", type=int, default=10_000)
    parser.add_argument(
        "--block-documents",
        type=int,
        help="blocks order: documents per block (default: the stream's)",
    )
    parser.add_argument(
        "--window-blocks", type=int, help="blocks order: blocks per window (default: the stream's)"
    )
    parser.add_argument(
        "--sidecar-rounds",
        type=int,
        default=0,
        help="largest disk corpus: rounds of open + first batch with and without its "
        "block-offsets sidecar (0: skip)",
    )
    parser.add_argument("--only-sidecar", action="store_true", help="just that comparison")
    parser.add_argument("--keep", action="store_true", help="keep the built corpora")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--resumed", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.resumed:
        work = child if args.child else resumed
        print(json.dumps(work(json.loads(args.child or args.resumed))))
        return 0
    disk = [int(n) for n in args.disk.split(",") if n]
    virtual = [int(n) for n in args.virtual.split(",") if n]
    if args.only_sidecar:
        args.sidecar_rounds, virtual = max(args.sidecar_rounds, 1), []
    report: dict[str, Any] = {}
    print(
        f"global layout, rank 3 of 8, rows of {args.block} tokens, {args.batch_size} row(s) per "
        "rank; fresh process, cursor at the middle of epoch 0, no plan store; "
        "ms as wall / CPU; memory in MiB"
    )
    print(
        "| corpus | order | open ms | load + first batch ms | total wall ms | seek ms | "
        "seek + batch ms | RssAnon MiB | peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    args.workdir.mkdir(parents=True, exist_ok=True)
    # (documents, wall ms, RssAnon MiB) of the largest permutation-order run, to project.
    permutation_ms: tuple[int, float, float] | None = None

    def measure(label: str, count: int, source: dict[str, Any]) -> None:
        nonlocal permutation_ms
        for order in ORDERS:
            if order == "permutation" and count > args.permutation_limit:
                if permutation_ms is not None:
                    measured, wall, anon = permutation_ms
                    scale = count / measured
                    print(
                        f"| {label} | permutation | projected (O(documents)) | | "
                        f"~{wall * scale / 1e3:,.0f} s | | | ~{anon * scale / 1024:,.0f} GiB | |"
                    )
                continue
            figures = _fresh(
                "child", _spec(args, kind="stream", order=order, source=source, seek=True)
            )
            assert figures is not None
            report[f"{label} {order}"] = figures
            print(_row(label, order, figures), flush=True)
            if order == "permutation":
                total = figures["open"][0] + figures["first"][0]
                permutation_ms = (count, total, figures["anon_first"])

    memory: dict[str, dict[str, Any]] = {}
    for count in disk:
        path = args.workdir / f"corpus-{count}"
        if not (path / "manifest.json").exists():
            shutil.rmtree(path, ignore_errors=True)
            seconds = build_corpus(path, count, seed=count)
            report[f"build {count}"] = seconds
            print(
                f"(built {count:,} documents with add_flat in {seconds:.0f} s: "
                f"{count / seconds / 1e6:.1f} M documents/s)",
                flush=True,
            )
        source = {"kind": "disk", "path": str(path)}
        try:
            if args.only_sidecar:
                if count == disk[-1]:
                    report["sidecar"] = sidecar_check(args, path)
                continue
            measure(f"{_label(count)} disk", count, source)
            memory[_label(count)] = (
                _fresh(
                    "child",
                    _spec(
                        args,
                        kind="stream",
                        order="blocks",
                        source=source,
                        cursor=0.25,
                        batches=args.stream_batches,
                    ),
                )
                or {}
            )
            if count == disk[-1]:
                report["resume"] = resume_check(args, source, args.workdir / "state.json")
                if args.sidecar_rounds:
                    report["sidecar"] = sidecar_check(args, path)
        finally:
            if not args.keep:
                shutil.rmtree(path, ignore_errors=True)
    for count in virtual:
        measure(f"{_label(count)} virtual", count, {"kind": "virtual", "documents": count})
    for label, figures in memory.items():
        print(
            f"private memory (RssAnon) at {label} documents: {figures['anon_first']:.0f} MiB "
            f"after the first batch, {figures['anon_last']:.0f} MiB after "
            f"{args.stream_batches:,} batches (target < 256 MiB)"
        )
    report["memory"] = memory
    if virtual:
        largest = report[f"{_label(virtual[-1])} virtual blocks"]
        print(
            f"plan memory of a {_label(virtual[-1])}-document epoch (RssAnon growth over open "
            f"-> first batch): {largest['plan_anon']:.0f} MiB (target < 1 GiB)"
        )
    if "resume" in report:
        verdict = "bitwise equal" if report["resume"]["equal"] else "DIFFERENT"
        print(
            f"killed (SIGKILL) and resumed in a fresh process at {_label(disk[-1])}: "
            f"batches {verdict} to the uninterrupted stream"
        )
    if args.mixture:
        report["mixture"] = mixture_check(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def without_sidecar(path: Path, copy: Path) -> None:
    """``copy``: the corpus at ``path`` (shard files hard-linked) with a manifest that
    names no block-offsets sidecar (same fingerprint): today's readers' gather."""
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    for name in os.listdir(path):
        if name.startswith("shard-"):
            os.link(path / name, copy / name)
    manifest = open_corpus(path).parsed_manifest
    metadata = {k: v for k, v in manifest.metadata.items() if k != BLOCK_OFFSETS_KEY}
    write_manifest(
        copy,
        Manifest.build(
            manifest.shards,
            dtype=manifest.dtype,
            vocab_size=manifest.vocab_size,
            metadata=metadata,
            shard_table=manifest.shard_table is not None,
        ),
    )


def sidecar_check(args: argparse.Namespace, path: Path) -> dict[str, Any]:
    """Open + first batch of the blocks order with and without the block-offsets sidecar,
    at the default window and at ``window_blocks=16``, fresh processes, interleaved rounds
    (medians; the first round of each warms the page cache and is not counted)."""
    copy = path.with_name(path.name + "-no-sidecar")
    without_sidecar(path, copy)
    variants = {
        f"{label} W={window or 'default'}": (corpus, window)
        for label, corpus in (("sidecar", path), ("offsets files", copy))
        for window in (None, 16)
    }
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        names = list(variants)
        for round_number in range(args.sidecar_rounds + 1):
            for name in names if round_number % 2 else names[::-1]:
                corpus, window = variants[name]
                spec = _spec(
                    args,
                    kind="stream",
                    order="blocks",
                    source={"kind": "disk", "path": str(corpus)},
                    seek=True,
                    window_blocks=window,
                )
                result = _fresh("child", spec)
                assert result is not None
                if round_number:
                    figures[name].append(result)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    print(
        "| blocks order | open + first batch ms (wall / CPU) | seek + batch ms | RssAnon MiB | "
        "peak RSS MiB |"
    )
    print("|---|---|---|---|---|")
    out: dict[str, Any] = {}
    for name, results in figures.items():

        def median(key: str, clock: int, results: list[dict[str, Any]] = results) -> float:
            values = [r[key][clock] if clock >= 0 else r[key] for r in results]
            return float(statistics.median(values))

        wall = statistics.median(r["open"][0] + r["first"][0] for r in results)
        cpu = statistics.median(r["open"][1] + r["first"][1] for r in results)
        out[name] = {"wall": wall, "cpu": cpu, "runs": results}
        print(
            f"| {name} | {wall:.0f} / {cpu:.0f} | {median('seek_batch', 0):.0f} / "
            f"{median('seek_batch', 1):.0f} | {median('anon_first', -1):.0f} | "
            f"{median('peak_rss', -1):.0f} |",
            flush=True,
        )
    return out


def resume_check(args: argparse.Namespace, source: dict[str, Any], state: Path) -> dict[str, Any]:
    """U streams 30 batches; A saves at 10 and is killed at 20; B resumes A's state."""
    common = _spec(args, kind="stream", order="blocks", source=source, state_file=str(state))
    whole = _fresh("child", {**common, "batches": 30, "digest_from": 10})
    killed = _fresh("child", {**common, "batches": 30, "save_at": 10, "kill_at": 20})
    again = _fresh("resumed", {**common, "batches": 20})
    assert whole is not None and again is not None
    return {"killed": killed is None, "equal": whole["digest"] == again["digest"]}


def mixture_check(args: argparse.Namespace) -> dict[str, Any]:
    """Two ``--mixture``-document corpora, a 0.5/0.5 ``Mixture``, fresh process."""
    paths = [args.workdir / f"mixture-{k}" for k in range(2)]
    try:
        for k, path in enumerate(paths):
            if not (path / "manifest.json").exists():
                shutil.rmtree(path, ignore_errors=True)
                seconds = build_corpus(path, args.mixture, seed=k)
                print(f"(built mixture source {k}, {args.mixture:,} documents, in {seconds:.0f} s)")
        sources = [{"kind": "disk", "path": str(path)} for path in paths]
        figures = _fresh("child", _spec(args, kind="mixture", sources=sources))
        assert figures is not None
        print(_row(f"2 x {_label(args.mixture)} disk", "Mixture (default order)", figures))
        return figures
    finally:
        if not args.keep:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
