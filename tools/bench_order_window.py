"""The cost of a ``"blocks"`` window size: first batch and memory after many batches.

For each ``window_blocks`` W (at ``block_documents`` B) a fresh process opens a global
stream over :class:`mixle.testing.VirtualDocuments` (``--documents`` documents of 1..7
tokens, so a batch of ``--block`` tokens spans ~``block / 4`` documents and a run of
batches crosses many windows), times the first batch (wall and CPU), reads
``--batches`` batches and reports RssAnon (private memory) after them. Windows of the
kept-window cache (4 windows of 24 bytes per document) are what grows with W.

    python -m tools.bench_order_window --windows 16,64,256
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from mixle.data import StreamingCorpus
from mixle.testing import VirtualDocuments
from tools._memory import rss_anon_mb


def measure(
    documents: int, block: int, batches: int, block_documents: int, window: int, packing: str
) -> dict[str, object]:
    """One stream's first-batch cost and RssAnon after ``batches`` batches."""
    corpus = VirtualDocuments(documents, lengths_limit=0)
    wall, cpu = time.perf_counter(), time.process_time()
    stream = StreamingCorpus(
        corpus,
        block=block,
        batch_size=1,
        rank=0,
        world_size=1,
        layout="global",
        block_documents=block_documents,
        window_blocks=window,
        packing=packing,
    )
    iterator = iter(stream)
    next(iterator)
    first = ((time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3)
    for _ in range(batches - 1):
        next(iterator)
    return {
        "packing": packing,
        "window_blocks": window,
        "window_documents": window * block_documents,
        "first_batch_wall_ms": round(first[0], 1),
        "first_batch_cpu_ms": round(first[1], 1),
        "rss_anon_mb": round(rss_anon_mb(), 1),
        "documents_read_approx": batches * block // 4,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=1 << 24)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--block-documents", type=int, default=4096)
    parser.add_argument("--windows", default="16,64,256")
    parser.add_argument("--packing", default="concatenate", choices=("concatenate", "best_fit"))
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(
            json.dumps(
                measure(
                    args.documents,
                    args.block,
                    args.batches,
                    args.block_documents,
                    args.one,
                    args.packing,
                )
            )
        )
        return 0
    for window in (int(w) for w in args.windows.split(",")):
        command = [
            sys.executable,
            "-m",
            "tools.bench_order_window",
            "--one",
            str(window),
            "--documents",
            str(args.documents),
            "--block",
            str(args.block),
            "--batches",
            str(args.batches),
            "--block-documents",
            str(args.block_documents),
            "--packing",
            args.packing,
        ]
        print(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
