"""Peer comparison users can rerun: mixle against Megatron-core, LitData, MosaicML MDS,
Grain and OLMo-core.

One synthetic corpus (uint16 ids, geometric document lengths) is generated in memory and
written in every installed format under ``--workdir`` (tmpfs by default: no page-out, the
same pinned pages for every method); then, in interleaved rounds (the order rotated
every round), the same run measures:

* **write** from an in-memory list of documents, against ``np.concatenate(out=)`` into a
  preallocated array + ``tofile`` (no fsync anywhere: mixle writes ``durable=False``);
* **random document read**, microseconds per document, against a slice of a plain
  ``ndarray`` view of the mapped file with the offsets in hand;
* **packed rows and windows**: int64 rows of ``block + 1`` tokens in batches, context
  tokens per second, against the memory-bandwidth floor: each batch's bytes copied by
  one strided copy into the same preallocated int64 array (per-row slices into a
  preallocated array are a reference row).

Every method is built and warmed up once (writes excepted: one write is a round), then
timed in interleaved rounds (21 for reads and rows, 11 for writes; the order rotated every
round). Every read and row measurement lasts ``--budget`` seconds (the counts are caps),
so fast and slow methods are exposed alike to other jobs. Every measurement is taken
against a *bracketing* floor: a read or row measurement is cut into six slices and the
floor runs for half a slice's time before each slice and after the last (floor, method,
floor, ..., floor; a write runs between two floor writes), so the two sample the same
stretch of the machine's load, and load that changes during a round moves both alike.
Objects the benchmark holds are frozen out of the garbage collector (``gc.freeze``) once
the methods are built, so a method's collections scan its own objects; torch runs one
intra-op thread (as in a ``DataLoader`` worker), so no peer's CPU time counts idle
threads spinning. A ratio is the trimmed mean over rounds (the middle 60%: a fifth of
the rounds dropped at each end) of the method's rate over its bracketing floor's, by
wall and by CPU time
(``time.process_time``, every thread of this process, plus the CPU time of its child
processes that ended: LitData's ``optimize`` worker), with the lowest and highest
round's ratio as its spread; *best* is the method's fastest round over its floor's
fastest by CPU time. The trimmed mean of the paired CPU ratios is the headline figure (README,
chart): other jobs on a shared machine add wall time and, through memory contention,
CPU time, but a fraction of a second apart they add it to both sides of a ratio. Each
packed-row method of mixle is also compared with the fastest peer's packed rows (per
round, the ratio of the two floor ratios). ``--compare A.json B.json`` prints how far
each ratio of run B moved from run A and flags every change over 10% (a figure holds
when two consecutive runs agree within 10%); ``--from-json`` remakes the table, chart
and README block of a run without measuring.

After the timed rounds every method runs once more with its memory measured: the peak
RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` before the pass) and the private
memory (``RssAnon`` sampled by a thread) it adds over the process's state before the pass.
Peak RSS includes file-backed pages of mapped corpus files; ``RssAnon`` does not.

A peer that is not installed is skipped with the pip line that installs it without
replacing the pinned CPU torch. Results: a markdown table (printed and written to
``--table``), the same figures as JSON (``--json``), a bar chart (``--png``) and the
README's table (``--readme``).

    python -m tools.bench_peers --json /tmp/run1.json      # 100M tokens, ~10 minutes
    python -m tools.bench_peers --json /tmp/run2.json --compare /tmp/run1.json
    python -m tools.bench_peers --compare /tmp/run1.json /tmp/run2.json   # the 10% check
    python -m tools.bench_peers --from-json /tmp/run2.json --readme README.md \
        --png docs/peers.png                                # the README table and chart
    python -m tools.bench_peers --quick                     # the CI smoke run
    python -m tools.bench_peers --groups rows --peers litdata,megatron   # rows only
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import shutil
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools._memory import status_kib
from tools._olmo_methods import write_olmo_tokens
from tools._peer_methods import (
    DISTRIBUTIONS,
    INSTALL,
    VOCAB,
    Corpus,
    Method,
    Tally,
    close_mds,
    installed,
    read_methods,
    row_methods,
    write_methods,
)


# -- the corpus --------------------------------------------------------------------------
def make_corpus(tokens: int, num_documents: int, seed: int, work: Path) -> Corpus:
    """``num_documents`` documents of geometric length summing to exactly ``tokens``."""
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(num_documents / tokens, size=num_documents).astype(np.int64)
    lengths = np.maximum(1, np.round(lengths * (tokens / lengths.sum()))).astype(np.int64)
    lengths[-1] += tokens - int(lengths.sum())  # absorb the rounding in the last document
    if lengths[-1] < 1:
        raise SystemExit(f"--tokens {tokens} is too few for --documents {num_documents}")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = rng.integers(0, VOCAB, size=tokens, dtype=np.uint16)
    documents = [flat[offsets[i] : offsets[i + 1]] for i in range(num_documents)]
    return Corpus(offsets, documents, work)


# -- memory ------------------------------------------------------------------------------
def measure_memory(run: Callable[[], object]) -> tuple[float, float]:
    """Run ``run`` once; return (peak RSS growth, RssAnon growth) in MB over the start."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM (peak RSS) to the current RSS
    rss_before, anon_before = status_kib("VmRSS"), status_kib("RssAnon")
    highest = [anon_before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            highest[0] = max(highest[0], status_kib("RssAnon"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join()
    highest[0] = max(highest[0], status_kib("RssAnon"))
    return (status_kib("VmHWM") - rss_before) / 1024, (highest[0] - anon_before) / 1024


# -- running -------------------------------------------------------------------------------
#: Slices a paired read or row measurement is cut into (see :func:`run_rounds`).
SLICES = 6


def run_rounds(
    methods: list[Method],
    rounds: int,
    count: int,
    budget: float,
    *,
    warm_up: bool = True,
    paired: bool = False,
    slices: int = 1,
) -> None:
    """Interleaved rounds: each method does ``count`` units or stops after ``budget`` s.

    The order rotates every round, so no method always runs right after the same one.
    With ``paired``, each other method's measurement is cut into ``slices`` slices and
    the group's floor (its method of kind ``"floor"``) runs for half a slice's time
    between every two slices, before the first and after the last (*bracketing*): a
    round is floor, A, floor, A, ..., floor, B, floor, ..., one floor run between two
    methods (it brackets both). A method's ratios are to the floor runs around its
    slices, summed: the two sample the same stretch of the machine's load, slice by
    slice, so a change of load inside a round (other jobs starting, stopping, their
    memory traffic) moves both alike and cancels in the ratio. Writes (one unit a
    measurement) use one slice: floor, write, floor, write, ... The floor's own figure
    is all its runs of the round.

    Objects that exist once the methods are built (the corpus's offsets, the read
    indices) are moved out of the garbage collector's reach (``gc.freeze``), so a
    method's collections scan its own objects, not the benchmark's; collection stays
    on for every method alike, and a full collection runs, untimed, after each method's
    measurement.
    """
    floor = next((m for m in methods if m.kind == "floor"), None) if paired else None
    for method in methods:  # build, then warm up: page cache, lazy opens, index builds
        method.step = method.make()
        if warm_up:
            timed(method.step, max(1, count // 10), budget)
    others = [m for m in methods if m is not floor]
    per_slice = -(-count // slices)
    gc.collect()
    gc.freeze()
    try:
        for round_number in range(rounds):
            shift = round_number % max(len(others), 1)
            floor_round = Tally()
            last = run_step(floor, per_slice, budget / slices / 2) if floor else (0, 0.0, 0.0)
            floor_round.add(last)
            for method in others[shift:] + others[:shift]:
                own, around = Tally(), Tally()
                around.add(last)
                for _ in range(slices if floor else 1):
                    own.add(run_step(method, per_slice if floor else count, budget / slices))
                    if floor is not None:
                        last = run_step(floor, per_slice, budget / slices / 2)
                        around.add(last)
                        floor_round.add(last)
                method.record(own)
                if floor is not None:
                    method.floor_rates.append(around.rates())
                gc.collect()  # untimed: no method inherits another's garbage
            if floor is not None:
                floor.record(floor_round)
    finally:
        gc.unfreeze()


def run_step(method: Method, count: int, budget: float) -> tuple[int, float, float]:
    assert method.step is not None
    return timed(method.step, count, budget)


def cpu_clock() -> float:
    """CPU seconds of this process (every thread) and of its children that have ended
    (a method that writes in a worker process, LitData's ``optimize``, is charged for it)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def timed(step: Callable[[], int], count: int, budget: float) -> tuple[int, float, float]:
    """Run ``step`` ``count`` times or until ``budget`` wall seconds have passed; return
    (units done, wall seconds, CPU seconds by :func:`cpu_clock`). The clock is read after
    every step (~60 ns, under 0.5% of the floor's fastest step), so a slow method does
    not overrun a short slice by several steps."""
    units, done = 0, 0
    start, cpu_start = time.perf_counter(), cpu_clock()
    while done < count:
        units += step()
        done += 1
        if time.perf_counter() - start > budget:
            break
    return units, time.perf_counter() - start, cpu_clock() - cpu_start


def measure_all_memory(methods: list[Method], count: int, budget: float) -> None:
    """Build each method afresh and run it once, measuring what it maps and allocates."""
    for method in methods:
        method.step = None  # unmap what the timed rounds touched
        method.memory = measure_memory(functools.partial(run_fresh, method, count, budget))


def run_fresh(method: Method, count: int, budget: float) -> tuple[int, float, float]:
    return timed(method.make(), count, budget)


# -- reporting -----------------------------------------------------------------------------
GROUPS = {
    "write": ("Write from an in-memory list", "M tokens/s"),
    "read": ("Random document read", "µs/document"),
    "rows": ("Packed rows and random windows (int64 rows of block + 1)", "M tokens/s"),
}


#: The share of rounds :func:`trimmed_mean` drops at each end.
TRIM = 0.2


def trimmed_mean(values: list[float]) -> float:
    """The mean of ``values`` without the lowest and highest ``TRIM`` of them (rounded
    down: all of them under five values). Rounds that other jobs disturbed most drop out
    at either end as with a median, and the middle rounds all count: over 21 rounds its
    spread between runs is ~0.7x the median's (bootstrap of the per-round ratios)."""
    ordered = sorted(values)
    cut = int(len(ordered) * TRIM)
    return statistics.fmean(ordered[cut : len(ordered) - cut])


def round_ratios(method: Method, floor: Method, clock: str) -> list[float]:
    """``method``'s rate over the floor's in each round: over the floor runs that
    bracket its slices when there are any, else over the floor's own runs that round."""
    base = method.floor_rates_by(clock) or floor.rates(clock)
    return [ours / floor_rate for ours, floor_rate in zip(method.rates(clock), base, strict=True)]


def best_ratio(method: Method, floor: Method) -> float:
    """The method's fastest round over the floor's fastest, by CPU time: each the least
    disturbed of its rounds (other jobs only ever add time), so the steadiest figure."""
    base = method.floor_rates_by("cpu") or floor.rates("cpu")
    return max(method.rates("cpu")) / max(base)


def results(methods: list[Method]) -> list[dict[str, Any]]:
    """One row per method: its median figure, and its ratio to its group's floor by wall
    and by CPU time, each the :func:`trimmed_mean` over rounds of the same-round (paired)
    ratio, with the lowest and highest round's ratio as the spread; and the best-round
    CPU ratio."""
    rows = []
    for group in GROUPS:
        members = [m for m in methods if m.group == group]
        if not members:
            continue
        floor = next(m for m in members if m.kind == "floor")
        for method in members:
            rate = method.rate()
            shown = 1e6 / rate if group == "read" else rate / 1e6
            peak, private = method.memory if method.memory else (float("nan"), float("nan"))
            wall, cpu = round_ratios(method, floor, "wall"), round_ratios(method, floor, "cpu")
            rows.append(
                {
                    "group": group,
                    "method": method.name,
                    "what": method.what,
                    "kind": method.kind,
                    "value": shown,
                    "unit": GROUPS[group][1],
                    "ratio": trimmed_mean(wall),
                    "ratio_low": min(wall),
                    "ratio_high": max(wall),
                    "cpu_ratio": trimmed_mean(cpu),
                    "cpu_ratio_low": min(cpu),
                    "cpu_ratio_high": max(cpu),
                    "cpu_ratio_best": best_ratio(method, floor),
                    "wall_rounds": wall,
                    "cpu_rounds": cpu,
                    "cpu_share": statistics.median(
                        c / w for c, w in zip(method.cpu_seconds, method.seconds, strict=True)
                    ),
                    "rounds": len(method.seconds),
                    "peak_rss_mb": peak,
                    "rss_anon_mb": private,
                }
            )
    return rows


#: Rows that are not packed rows (random windows), left out of the peer comparison.
WINDOWS = ("TokenStream", "get_batch")


def versus_peers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each packed-row method of mixle against the fastest peer's packed rows, by CPU.

    The fastest peer is the peer row with the highest CPU ratio to the floor.
    Per round the ratio of the two methods' floor ratios (each to its own bracketing
    floor runs, so load drift between the two cancels); its trimmed mean and spread, and
    the ratio of the best-round ratios.
    """
    packed = [
        r for r in rows if r["group"] == "rows" and not any(w in r["method"] for w in WINDOWS)
    ]
    peers = [r for r in packed if r["kind"] == "peer"]
    if not peers:
        return []
    fastest = max(peers, key=lambda r: r["cpu_ratio"])
    out = []
    for row in packed:
        if row["kind"] != "mixle":
            continue
        wall, cpu = (
            [ours / theirs for ours, theirs in zip(row[key], fastest[key], strict=True)]
            for key in ("wall_rounds", "cpu_rounds")
        )
        out.append(
            {
                "group": "vs peer",
                "method": row["method"],
                "kind": "mixle",
                "peer": fastest["method"],
                "ratio": trimmed_mean(wall),
                "cpu_ratio": trimmed_mean(cpu),
                "cpu_ratio_low": min(cpu),
                "cpu_ratio_high": max(cpu),
                "cpu_ratio_best": row["cpu_ratio_best"] / fastest["cpu_ratio_best"],
            }
        )
    return out


def versus_markdown(versus: list[dict[str, Any]]) -> str:
    lines = [
        "| mixle method | × fastest peer (CPU, trimmed mean of rounds) | round spread "
        "| × fastest peer (CPU, best rounds) | peer |",
        "|---|---:|---:|---:|---|",
    ]
    for row in versus:
        lines.append(
            f"| {row['method']} | {row['cpu_ratio']:.2f} | {row['cpu_ratio_low']:.2f}-"
            f"{row['cpu_ratio_high']:.2f} | {row['cpu_ratio_best']:.2f} | {row['peer']} |"
        )
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| measure | method | what | figure | × floor (wall) | round spread | × floor (CPU) "
        "| round spread | × floor (CPU, best) | CPU / wall | peak RSS +MB | RssAnon +MB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        name = f"**{row['method']}**" if row["kind"] == "mixle" else row["method"]
        lines.append(
            f"| {row['group']} | {name} | {row['what']} | {row['value']:,.2f} {row['unit']} "
            f"| {row['ratio']:.3f} | {row['ratio_low']:.3f}-{row['ratio_high']:.3f} "
            f"| {row['cpu_ratio']:.3f} | {row['cpu_ratio_low']:.3f}-{row['cpu_ratio_high']:.3f} "
            f"| {row['cpu_ratio_best']:.3f} | {row['cpu_share']:.2f} "
            f"| {row['peak_rss_mb']:.0f} | {row['rss_anon_mb']:.1f} |"
        )
    return "\n".join(lines) + "\n"


#: Two runs' ratios agree when they differ by at most this much (issue #31).
AGREEMENT = 0.10


def agreement(rows: list[dict[str, Any]], previous: list[dict[str, Any]]) -> tuple[str, int]:
    """How far each ratio of this run is from the same ratio in ``previous`` (a run's JSON
    rows): a markdown table with every change over :data:`AGREEMENT` flagged, the largest
    change by each clock (``CPU best``, the best-round CPU ratio, where both runs have it),
    and the number of flagged ratios."""
    before = {(row["group"], row["method"]): row for row in previous}
    keys = [("cpu_ratio", "CPU"), ("ratio", "wall")]
    if all("cpu_ratio_best" in row for row in [*rows, *previous]):
        keys.append(("cpu_ratio_best", "CPU best"))
    lines = [
        "| measure | method | "
        + " | ".join(f"× {label}: before / now | Δ" for _, label in keys)
        + " |",
        "|---|---|" + "---:|---:|" * len(keys),
    ]
    worst = dict.fromkeys((key for key, _ in keys), 0.0)
    flagged = dict.fromkeys((key for key, _ in keys), 0)
    compared = 0
    for row in rows:
        old = before.get((row["group"], row["method"]))
        if old is None or row["kind"] == "floor":
            continue
        compared += 1
        cells = []
        for key, _ in keys:
            change = row[key] / old[key] - 1
            worst[key] = max(worst[key], abs(change))
            mark = ""
            if round(abs(change), 3) > AGREEMENT:  # as shown: +10.0% holds
                flagged[key] += 1
                mark = " **>10%**"
            cells.append(f"{old[key]:.3f} / {row[key]:.3f} | {change:+.1%}{mark}")
        lines.append(f"| {row['group']} | {row['method']} | " + " | ".join(cells) + " |")
    largest = ", ".join(
        f"{label} {compared - flagged[key]} of {compared} within 10% (largest {worst[key]:.1%})"
        for key, label in keys
    )
    lines.append(f"\nagreement: {largest}")
    return "\n".join(lines) + "\n", flagged["cpu_ratio"]


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in GROUPS if any(r["group"] == g for r in rows)]
    heights = [sum(r["group"] == g for r in rows) for g in groups]
    figure, axes = plt.subplots(
        len(groups),
        1,
        figsize=(9, 1.2 + 0.42 * sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    colours = {"floor": "#888888", "reference": "#bbbbbb", "mixle": "#1f77b4", "peer": "#ff7f0e"}
    for axis, group in zip(axes[:, 0], groups, strict=True):
        members = [r for r in rows if r["group"] == group][::-1]
        ratios = [r["cpu_ratio"] for r in members]
        axis.barh(
            [r["method"] for r in members], ratios, color=[colours[r["kind"]] for r in members]
        )
        for y, ratio in enumerate(ratios):
            axis.text(ratio, y, f" {shown(ratio)}x", va="center", fontsize=8)
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_xlim(0, max(ratios) * 1.2)
        axis.set_title(f"{GROUPS[group][0]}: × floor, CPU time (higher is faster)", fontsize=10)
        axis.tick_params(axis="y", labelsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


#: The README table's columns: the name every row of that library starts with.
LIBRARIES = ("mixle", "Megatron", "LitData", "MDS", "Grain", "OLMo-core")


def readme_line(row: dict[str, Any]) -> str:
    """The README table line a row belongs to."""
    if row["group"] != "rows":
        return {"write": "write from a list", "read": "random document read"}[row["group"]]
    name = row["method"]
    if "TokenStream" in name or "get_batch" in name:
        return "random windows"
    if any(mark in name for mark in ("best-fit", "BestFit", "Packed")):
        return "packed rows, best-fit"
    return "packed rows, concatenate and chunk"


def shown(ratio: float) -> str:
    """A ratio as the README shows it: two decimals, or two significant digits below 0.1."""
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def readme_table(rows: list[dict[str, Any]]) -> str:
    """The README's table: × the same-run floor by CPU time (the trimmed mean of the rounds'
    paired ratios), one column per library."""
    present = [lib for lib in LIBRARIES if any(r["method"].startswith(lib) for r in rows)]
    lines = [
        "| × same-run floor (CPU) | " + " | ".join(present) + " |",
        "|---|" + "---|" * len(present),
    ]
    order = dict.fromkeys(readme_line(r) for r in rows if r["kind"] != "floor")
    for line in order:
        cells = []
        for library in present:
            members = [
                r for r in rows if r["method"].startswith(library) and readme_line(r) == line
            ]
            cell = ", ".join(
                f"{shown(r['cpu_ratio'])} "
                f"({r['method'].removeprefix(library).strip() or 'default'})"
                for r in members
            )
            cells.append(f"**{cell}**" if library == "mixle" and cell else cell or "—")
        lines.append(f"| {line} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: The README lines between which ``--readme`` writes the table (the rest is kept).
README_BEGIN = "<!-- bench_peers: begin"
README_END = "<!-- bench_peers: end -->"


def readme_block(run: dict[str, Any]) -> str:
    """What ``--readme`` puts between the README's markers: the run it comes from, the
    table, and each packed-row method against the fastest peer."""
    text = (
        f"{README_BEGIN} (python -m tools.bench_peers --from-json RUN.json "
        "--readme README.md --png docs/peers.png) -->\n"
        f"Recorded {run.get('date', 'on an earlier day')}: {run['header']}. "
        "× floor by CPU time, the trimmed mean over rounds of each round's ratio to its bracketing "
        "floor:\n\n" + readme_table(run["rows"])
    )
    if run.get("versus"):
        peer = run["versus"][0]["peer"]
        text += (
            f"\nmixle's packed rows × the fastest peer's ({peer}), CPU, trimmed mean of rounds: "
            + ", ".join(
                f"{v['method'].removeprefix('mixle ')} {v['cpu_ratio']:.2f}" for v in run["versus"]
            )
            + ".\n"
        )
    return text + README_END + "\n"


def write_readme(path: Path, run: dict[str, Any]) -> None:
    """Replace the block between the markers in ``path`` (a README), or, when ``path`` has
    none (or does not exist), write the block alone to it."""
    block = readme_block(run)
    text = path.read_text() if path.exists() else ""
    if README_BEGIN in text and README_END in text:
        head, rest = text.split(README_BEGIN, 1)
        tail = rest.split(README_END, 1)[1].removeprefix("\n")
        path.write_text(head + block + tail)
    else:
        path.write_text(block)


def on_tmpfs(path: Path) -> bool:
    """Whether ``path`` lies on a tmpfs mount (pages that the kernel cannot page out)."""
    resolved, best = str(path.resolve()), ("", "")
    with open("/proc/mounts", encoding="ascii", errors="replace") as mounts:
        for line in mounts:
            _, point, kind = line.split()[:3]
            inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
            if inside and len(point) > len(best[0]):
                best = (point, kind)
    return best[1] == "tmpfs"


def versions(peers: set[str]) -> dict[str, str]:
    found = {"numpy": np.__version__, "torch": torch.__version__}
    found.update({DISTRIBUTIONS[p]: version(DISTRIBUTIONS[p]) for p in sorted(peers)})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/dev/shm/peers-bench"),
        help="where the corpora are written (default on tmpfs: no page-out for any method)",
    )
    parser.add_argument("--tokens", type=int, default=100_000_000, help="uint16 tokens")
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--write-rounds", type=int, default=11)
    parser.add_argument(
        "--batches", type=int, default=1_000_000, help="batches per timed measurement at most"
    )
    parser.add_argument(
        "--reads", type=int, default=1_000_000, help="reads per timed measurement at most"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=0.3,
        help="seconds per measurement: by default every read and row measurement lasts "
        "this long (the counts are caps), so fast and slow methods are exposed alike to "
        "other jobs; the floor runs half as long right before each (the paired floor)",
    )
    parser.add_argument("--peers", default=",".join(INSTALL), help="comma-separated subset")
    parser.add_argument(
        "--groups",
        default=",".join(GROUPS),
        help="comma-separated subset of the measures (write, read, rows); without write "
        "every format is still written once, untimed",
    )
    parser.add_argument("--table", type=Path, default=Path("peers.md"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=Path("peers.png"))
    parser.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="also write the README's table: between the bench_peers markers of this file "
        "(README.md), or the table alone when it has none",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="measure nothing: write --table, --png and --readme from this earlier run's "
        "--json (regenerate the README table and docs/peers.png in one command)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="+",
        default=None,
        metavar="RUN.json",
        help="one earlier run's --json: print how far each ratio of this run moved from "
        "it; two: measure nothing, compare the second run with the first. Every ratio "
        "that moved more than 10%% is flagged; the exit status is 1 when a CPU ratio did",
    )
    parser.add_argument("--keep", action="store_true", help="keep the written corpora")
    parser.add_argument(
        "--quick", action="store_true", help="2M tokens, 2 rounds: the CI smoke run"
    )
    args = parser.parse_args()
    if args.compare is not None and len(args.compare) > 2:
        parser.error("--compare: give one earlier run's JSON, or two runs to compare")
    if args.compare is not None and len(args.compare) == 2:
        first, second = (load_run(parser, "--compare", path) for path in args.compare)
        return compare(first, second, *args.compare)
    if args.from_json is not None:
        saved = load_run(parser, "--from-json", args.from_json)
        report(saved, args)
        if args.compare is not None:
            before = load_run(parser, "--compare", args.compare[0])
            return compare(before, saved, args.compare[0], args.from_json)
        return 0
    earlier = load_run(parser, "--compare", args.compare[0]) if args.compare else None
    if args.quick:
        args.tokens, args.documents, args.rounds, args.write_rounds = 2_000_000, 4_000, 2, 1
        args.batches, args.reads, args.budget = 20, 2_000, 0.3
    groups = {g for g in args.groups.split(",") if g}
    if not groups or groups - set(GROUPS):
        parser.error(f"--groups: choose from {', '.join(GROUPS)}. Got {args.groups!r} instead.")
    requested = {p for p in args.peers.split(",") if p}
    unknown = requested - set(INSTALL)
    if unknown:
        parser.error(f"--peers: unknown {sorted(unknown)}; choose from {sorted(INSTALL)}")
    torch.set_num_threads(1)  # a DataLoader worker's setting: no intra-op threads spinning
    warnings.filterwarnings("ignore")  # peers warn at import (no Transformer Engine, ...)
    peers = {p for p in sorted(requested) if installed(p)}
    work = args.workdir
    load_before = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if not on_tmpfs(work):
        print(f"warning: --workdir {work} is not on tmpfs; file pages may be evicted mid-run")
    try:
        started = time.perf_counter()
        corpus = make_corpus(args.tokens, args.documents, seed=0, work=work)
        print(
            f"corpus: {corpus.num_tokens:,} uint16 tokens, {args.documents:,} documents; "
            f"peers: {', '.join(sorted(peers)) or 'none'}"
        )
        methods = write_methods(corpus, peers)
        if "write" in groups:
            run_rounds(methods, args.write_rounds, 1, float("inf"), warm_up=False, paired=True)
            measure_all_memory(methods, 1, float("inf"))
        else:  # the formats the readers read, written once, untimed
            for method in methods:
                method.make()()
            methods = []
        print(f"writes done ({time.perf_counter() - started:.0f} s)")
        if "olmo" in peers:  # OLMo-core's input: the Dolma toolkit's flat file (untimed)
            write_olmo_tokens(corpus.documents, work)
        corpus.documents = []  # the readers below see files only
        gc.collect()
        indices = np.random.default_rng(1).integers(0, args.documents, args.reads).tolist()
        reads = read_methods(corpus, peers, indices) if "read" in groups else []
        if reads:
            run_rounds(reads, args.rounds, args.reads, args.budget, paired=True, slices=SLICES)
            measure_all_memory(reads, args.reads, args.budget)
            print(f"reads done ({time.perf_counter() - started:.0f} s)")
        rows = row_methods(corpus, peers, args.block, args.batch_size) if "rows" in groups else []
        if rows:
            run_rounds(rows, args.rounds, args.batches, args.budget, paired=True, slices=SLICES)
            measure_all_memory(rows, args.batches, args.budget)
        methods += reads + rows
        print(f"rows done ({time.perf_counter() - started:.0f} s)")
    finally:
        close_mds()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table = results(methods)
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    header = (
        f"{corpus.num_tokens:,} uint16 tokens / {args.documents:,} documents, block {args.block}, "
        f"batch {args.batch_size}, {args.rounds} rounds (writes {args.write_rounds}), "
        f"{SLICES} slices a measurement bracketed by the floor, trimmed means; "
        f"load average {load} on {os.cpu_count()} cores; "
        + ", ".join(f"{k} {v}" for k, v in versions(peers).items())
    )
    run = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "header": header,
        "rows": table,
        "versus": versus_peers(table),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(run, indent=1))
    report(run, args)
    if earlier is not None:
        return compare(earlier, run, args.compare[0], args.json or Path("this run"))
    return 0


def load_run(parser: argparse.ArgumentParser, option: str, path: Path) -> dict[str, Any]:
    """A run's ``--json``, or a one-line usage error (exit 2) naming the file."""
    try:
        run = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        parser.error(f"{option} {path}: cannot read a run's JSON ({error})")
    if not isinstance(run, dict) or not {"header", "rows"} <= run.keys():
        parser.error(f"{option} {path}: not a bench_peers --json (no 'header' and 'rows')")
    return run


def report(run: dict[str, Any], args: argparse.Namespace) -> None:
    """Print a run's tables; write ``--table``, ``--png`` and (when given) ``--readme``."""
    text = run["header"] + "\n\n" + markdown(run["rows"])
    if run.get("versus"):
        text += "\nmixle's packed rows against the fastest peer's:\n\n"
        text += versus_markdown(run["versus"])
    print("\n" + text)
    args.table.write_text(text)
    chart(run["rows"], args.png, run["header"].split("; load")[0])
    print(f"wrote {args.table} and {args.png}")
    if args.readme is not None:
        write_readme(args.readme, run)
        print(f"wrote the peer table into {args.readme}")


def compare(first: dict[str, Any], second: dict[str, Any], *names: Path) -> int:
    """Print the agreement of ``second`` with ``first``; 1 when a CPU ratio moved > 10%."""
    text, flagged = agreement(
        second["rows"] + second.get("versus", []), first["rows"] + first.get("versus", [])
    )
    print(f"\n{names[0]} -> {names[1]}:\n\n" + text)
    return 1 if flagged else 0


if __name__ == "__main__":
    raise SystemExit(main())
