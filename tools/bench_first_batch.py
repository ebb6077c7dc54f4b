"""Time to first batch at a cursor, in a fresh process, at 10^6, 10^7 and 10^8 documents.

For each size, one synthetic corpus (uint16 ids, geometric document lengths, mean
``--mean-length`` tokens) is written once (untimed) for every reader: a mixle corpus
(``CorpusWriter.add_flat``), one flat token file that Megatron (``.bin`` plus an
``.idx`` written in its format), OLMo-core and the Grain source share, and a LitData
export (``mixle.corpus.export``, ``TokensLoader`` chunks). The cursor is the middle of
epoch 0 (batch ``B // 2`` of ``B``; block ``--block``, batch ``--batch-size``). Each
library resumes there with its own mechanism, in a fresh ``python`` process whose
imports are done before the clock starts, and produces one batch:

* **mixle** ``StreamingCorpus(plan_store=PlanFiles(dir))`` + ``load_state_dict`` (the
  default order of this tree); *first run*: an empty store (the epoch plan is built and
  written); *cached*: the plan file an earlier process wrote.
* **Megatron** ``GPTDataset`` over ``IndexedDataset``: *first run* builds its document,
  sample and shuffle indices (and caches them under ``path_to_cache``); *cached* loads
  them; then the cursor's ``batch`` samples, stacked.
* **LitData** ``StreamingDataset(shuffle=True)`` + ``load_state_dict`` of the state its
  ``state_dict(num_samples_yielded=...)`` gives, then ``batch`` items: it replays the
  chunk order and the samples before the cursor (no cache: first run = cached).
* **Grain** ``MapDataset.source(...).shuffle(seed)`` (``index_shuffle``) ->
  ``to_iter_dataset`` -> ``ConcatThenSplitIterDataset`` -> ``.batch``, the pipeline
  ``tools/bench_peers.py`` times, + ``set_state`` of the iterator state Grain's own
  ``get_state`` gave one batch past the cursor's document (a partial document carried
  over, as a checkpoint mid-epoch holds), then one batch (no cache: first run = cached).
* **OLMo-core** ``NumpyFSLDataset`` + ``NumpyFSLDataLoader.load_state_dict`` +
  ``reshuffle``: *first run* builds and saves the global instance indices; *cached*
  maps the saved file.

MosaicML MDS (``StreamingDataset``'s sample-id build) is not measured: it is not
installed on this machine (the pip line is printed), and its only writer, ``MDSWriter``
at about 10^5 samples/s here, would take hours at 10^8 documents.

Wall and CPU milliseconds (``time.process_time`` of the child), medians over ``--rounds``
fresh processes for cached runs (a first run is once per size: it creates the cache).

    python -m tools.bench_first_batch                          # 10^6, 10^7, 10^8
    python -m tools.bench_first_batch --sizes 1000000 --rounds 2   # the CI smoke size
    python -m tools.bench_first_batch --png docs/first_batch.png --json /tmp/fb.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mixle.corpus import CorpusWriter, open_corpus
from mixle.corpus.export import export_corpus
from tools._peer_methods import VOCAB, installed

ROOT = str(Path(__file__).resolve().parent.parent)

PRELUDE = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {root!r})
spec = json.loads(sys.argv[1])
"""

#: One child program per library: imports, then ``start`` / ``cpu`` and one batch.
CHILDREN = {
    "mixle": """
from mixle.corpus import open_corpus
from mixle.corpus.storage.plan_cache import PlanFiles
from mixle.data import StreamingCorpus
start, cpu = time.perf_counter(), time.process_time()
corpus = StreamingCorpus(open_corpus(spec["mixle"]), rank=0, world_size=1, block=spec["block"],
    batch_size=spec["batch"], plan_store=PlanFiles(spec["plans"]))
corpus.load_state_dict({**corpus.state_dict(), "epoch": 0, "batch": spec["cursor_batch"]})
next(iter(corpus))
""",
    "megatron": """
import numpy as np, torch
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.utils import Split
from tools._peer_methods import SpecialTokens
start, cpu = time.perf_counter(), time.process_time()
indexed = IndexedDataset(spec["megatron"])
config = GPTDatasetConfig(random_seed=0, sequence_length=spec["block"], split="100,0,0",
    path_to_cache=spec["megatron_cache"], tokenizer=SpecialTokens(0, spec["vocab"], spec["vocab"]),
    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
    create_attention_mask=False)
everything = np.arange(len(indexed), dtype=np.int32)
dataset = GPTDataset(indexed, spec["megatron"], everything, None, Split.train, config)
first = spec["cursor_batch"] * spec["batch"]
torch.stack([dataset[i]["tokens"] for i in range(first, first + spec["batch"])])
""",
    "litdata": """
import numpy as np
from litdata import StreamingDataset, TokensLoader
start, cpu = time.perf_counter(), time.process_time()
dataset = StreamingDataset(spec["litdata"], item_loader=TokensLoader(block_size=spec["block"] + 1),
    shuffle=True, seed=0)
dataset.load_state_dict(spec["litdata_state"])
items = iter(dataset)
np.stack([np.asarray(next(items)) for _ in range(spec["batch"])])
""",
    "grain": """
import numpy as np, grain
from tools.bench_first_batch import grain_batches
start, cpu = time.perf_counter(), time.process_time()
batches = grain_batches(spec["flat"], spec["offsets"], spec["block"], spec["batch"])
state = spec["grain_state"]  # JSON made its slice tuples lists: Grain compares tuples
state["remainder_slices"] = {k: tuple(v) for k, v in state["remainder_slices"].items()}
batches.set_state(state)
next(batches)
""",
    "olmo": """
from olmo_core.data import DataCollator, NumpyFSLDataLoader, NumpyFSLDataset
start, cpu = time.perf_counter(), time.process_time()
dataset = NumpyFSLDataset(spec["flat"], sequence_length=spec["block"] + 1, pad_token_id=0,
    eos_token_id=0, vocab_size=spec["vocab"])
dataset.work_dir = spec["olmo_work"]
dataset.prepare()
loader = NumpyFSLDataLoader(dataset, collator=DataCollator(pad_token_id=0),
    global_batch_size=spec["batch"] * (spec["block"] + 1), work_dir=spec["olmo_work"], seed=0)
loader.load_state_dict({**loader.state_dict(), "epoch": 1,
    "batches_processed": spec["cursor_batch"],
    "tokens_processed": spec["cursor_batch"] * spec["batch"] * (spec["block"] + 1)})
loader.reshuffle(epoch=1)
next(iter(loader))
""",
}
EPILOGUE = """
print((time.perf_counter() - start) * 1e3, (time.process_time() - cpu) * 1e3)
"""

#: What each library's cache is (removed before its first run); ``None``: it has none.
CACHES = {
    "mixle": "plans",
    "megatron": "megatron_cache",
    "litdata": None,
    "grain": None,
    "olmo": "olmo_work",
}
LABELS = {
    "mixle": "mixle StreamingCorpus",
    "megatron": "Megatron GPTDataset",
    "litdata": "LitData StreamingDataset",
    "grain": "Grain ConcatThenSplit set_state",
    "olmo": "OLMo-core NumpyFSLDataLoader",
}


def grain_batches(flat: str, offsets: str, block: int, batch: int) -> Any:
    """An iterator of Grain's concatenate-and-chunk batches of ``block + 1``-token rows
    over the flat token file (``tools/_grain_methods.py``'s source and pipeline)."""
    import grain
    import grain.experimental as experimental

    from tools._grain_methods import FlatSource

    source = FlatSource(Path(flat), np.load(offsets, mmap_mode="r"))
    documents = (
        grain.MapDataset.source(source)
        .shuffle(seed=0)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    )
    rows = experimental.ConcatThenSplitIterDataset(documents, length_struct={"tokens": block + 1})
    return iter(rows.batch(batch))


def grain_state(flat: Path, offsets: Path, block: int, batch: int, document: int) -> Any:
    """The state Grain's ``get_state`` gives one batch after starting at ``document``
    (``next_index``) of the shuffled order: a mid-epoch checkpoint's state."""
    batches = grain_batches(str(flat), str(offsets), block, batch)
    batches.set_state(
        {
            "parent_state": {"next_index": document},
            "remainder_slices": {"tokens": (-1, -1)},
            "elements_from_buffer_after_checkpoint": 0,
        }
    )
    next(batches)
    return batches.get_state()


def write_megatron_index(prefix: Path, lengths: np.ndarray) -> None:
    """Megatron's ``.idx`` for ``len(lengths)`` single-sequence documents of uint16 ids
    (what ``IndexedDatasetBuilder`` writes, built with numpy instead of a Python loop)."""
    pointers = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1] * 2, out=pointers[1:])
    with open(f"{prefix}.idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00")
        index.write(np.array([1], "<u8").tobytes())  # version
        index.write(np.array([8], "<u1").tobytes())  # Megatron's dtype code of uint16
        index.write(np.array([lengths.shape[0], lengths.shape[0] + 1], "<u8").tobytes())
        index.write(lengths.astype("<i4").tobytes())
        index.write(pointers.astype("<i8").tobytes())
        index.write(np.arange(lengths.shape[0] + 1, dtype="<i8").tobytes())


def build(work: Path, documents: int, mean_length: float, block: int, peers: set[str]) -> Path:
    """Write every reader's files for ``documents`` documents under ``work``; return the
    flat token file (shared by Megatron, OLMo-core and Grain)."""
    rng = np.random.default_rng(0)
    lengths = rng.geometric(1.0 / mean_length, size=documents).astype(np.int64)
    tokens = rng.integers(0, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
    flat = work / "tokens.bin"
    tokens.tofile(flat)
    offsets = np.zeros(documents + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    np.save(work / "offsets.npy", offsets)
    with CorpusWriter(work / "mixle", vocab_size=VOCAB, overwrite=True, durable=False) as w:
        w.add_flat(tokens, lengths)
    del tokens
    if "megatron" in peers:
        (work / "megatron.bin").hardlink_to(flat)
        write_megatron_index(work / "megatron", lengths)
    if "litdata" in peers:
        export_corpus(
            open_corpus(work / "mixle"), work / "litdata", "litdata", block_size=block + 1
        )
    return flat


def litdata_state(path: Path, block: int, samples: int) -> dict[str, Any]:
    """The state LitData's own ``state_dict`` gives after ``samples`` items."""
    from litdata import StreamingDataset, TokensLoader

    dataset = StreamingDataset(
        str(path), item_loader=TokensLoader(block_size=block + 1), shuffle=True, seed=0
    )
    return dataset.state_dict(num_samples_yielded=samples, num_workers=1, batch_size=1)


def fresh(library: str, spec: dict[str, Any]) -> tuple[float, float]:
    """``(wall ms, CPU ms)`` of one fresh process resuming ``library`` at the cursor."""
    program = PRELUDE.format(root=ROOT) + CHILDREN[library] + EPILOGUE
    result = subprocess.run(
        [sys.executable, "-c", program, json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{library} child failed:\n{result.stderr[-3000:]}")
    wall, cpu = result.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def measure_size(
    work: Path, documents: int, args: argparse.Namespace, peers: set[str]
) -> list[dict[str, Any]]:
    """First and cached runs of every library at ``documents`` documents."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    flat = build(work, documents, args.mean_length, args.block, peers)
    spec: dict[str, Any] = {
        "block": args.block,
        "batch": args.batch_size,
        "vocab": VOCAB,
        "cursor_batch": mixle_batches(work / "mixle", args) // 2,
        "mixle": str(work / "mixle"),
        "plans": str(work / "plans"),
        "megatron": str(work / "megatron"),
        "megatron_cache": str(work / "megatron-cache"),
        "litdata": str(work / "litdata"),
        "flat": str(flat),
        "offsets": str(work / "offsets.npy"),
        "olmo_work": str(work / "olmo"),
    }
    if "litdata" in peers:
        rows = spec["cursor_batch"] * args.batch_size
        spec["litdata_state"] = litdata_state(work / "litdata", args.block, rows)
    if "grain" in peers:
        spec["grain_state"] = grain_state(
            flat, work / "offsets.npy", args.block, args.batch_size, documents // 2
        )
    found = []
    for library in ["mixle", *sorted(peers)]:
        cache = CACHES[library]
        if cache is not None:
            shutil.rmtree(spec[cache], ignore_errors=True)
            Path(spec[cache]).mkdir(parents=True)
        first = fresh(library, spec)
        cached = [fresh(library, spec) for _ in range(args.rounds)]
        found.append(
            {
                "library": LABELS[library],
                "documents": documents,
                "first_wall_ms": first[0],
                "first_cpu_ms": first[1],
                "cached_wall_ms": statistics.median(c[0] for c in cached),
                "cached_cpu_ms": statistics.median(c[1] for c in cached),
                "has_cache": cache is not None,
            }
        )
        print(
            f"  {documents:>11,} documents  {LABELS[library]:<30} first {first[0]:9.1f} ms "
            f"({first[1]:9.1f} CPU)  cached {found[-1]['cached_wall_ms']:9.1f} ms "
            f"({found[-1]['cached_cpu_ms']:9.1f} CPU)",
            flush=True,
        )
    shutil.rmtree(work, ignore_errors=True)
    return found


def mixle_batches(path: Path, args: argparse.Namespace) -> int:
    """How many batches epoch 0 of mixle's ``StreamingCorpus`` over ``path`` has."""
    from mixle.data import StreamingCorpus

    corpus = StreamingCorpus(
        open_corpus(path), rank=0, world_size=1, block=args.block, batch_size=args.batch_size
    )
    return corpus.num_batches(0)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| documents | library (resume mechanism) | first run ms (CPU) | cached ms (CPU) |",
        "|---:|---|---:|---:|",
    ]
    for row in rows:
        cached = (
            f"{row['cached_wall_ms']:,.1f} ({row['cached_cpu_ms']:,.1f})"
            if row["has_cache"]
            else "no cache (same as first)"
        )
        name = f"**{row['library']}**" if row["library"].startswith("mixle") else row["library"]
        lines.append(
            f"| {row['documents']:,} | {name} | {row['first_wall_ms']:,.1f} "
            f"({row['first_cpu_ms']:,.1f}) | {cached} |"
        )
    return "\n".join(lines) + "\n"


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Wall ms against documents, log-log, one line per library and run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.8))
    for library in dict.fromkeys(r["library"] for r in rows):
        mine = [r for r in rows if r["library"] == library]
        sizes = [r["documents"] for r in mine]
        (line,) = axis.plot(sizes, [r["first_wall_ms"] for r in mine], marker="o", label=library)
        if mine[0]["has_cache"]:
            axis.plot(
                sizes,
                [r["cached_wall_ms"] for r in mine],
                marker="s",
                linestyle="--",
                color=line.get_color(),
                label=f"{library} (cached)",
            )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("documents in the corpus")
    axis.set_ylabel("fresh process to first batch at mid-epoch (ms, wall)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("/dev/shm/first-batch-bench"))
    parser.add_argument("--sizes", default="1000000,10000000,100000000", help="documents")
    parser.add_argument("--mean-length", type=float, default=4.0, help="tokens per document")
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="cached runs per library")
    parser.add_argument("--peers", default="megatron,litdata,grain,olmo")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args()
    try:
        sizes = [int(float(size)) for size in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: expected comma-separated document counts, got {args.sizes!r}")
    choices = sorted(set(CHILDREN) - {"mixle"})
    unknown = {p for p in args.peers.split(",") if p} - set(choices)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}; choose from {choices}")
    warnings.filterwarnings("ignore")
    installed("mds")  # prints the pip line when missing; MDS is not measured here
    peers = {p for p in args.peers.split(",") if p and installed(p)}
    rows = []
    for documents in sizes:
        rows += measure_size(args.workdir, documents, args, peers)
    title = (
        f"mean {args.mean_length:g} tokens/document, block {args.block}, batch "
        f"{args.batch_size}; cursor mid-epoch; cached: median of {args.rounds}"
    )
    print("\n" + title + "\n\n" + markdown(rows))
    if args.json is not None:
        args.json.write_text(json.dumps({"header": title, "rows": rows}, indent=1))
    if args.png is not None:
        chart(rows, args.png, title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
