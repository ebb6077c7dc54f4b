"""``tools/check_benchmarks_doc.py``: lost figures, dangling links and missing pages are found."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tools.check_benchmarks_doc import (
    ROOT,
    anchors,
    base_text,
    check,
    external_link_problems,
    link_problems,
    lost_lines,
    page_problems,
    repository_inputs,
    slug,
)

PAGE = """# Benchmarks

## Index

| benchmark | script |
|---|---|
| **Writing** | |
| [Reader](#reader-issue-3) | `bench_reader.py` |

## Reader (issue #3)

**Script:** `tools/bench_reader.py`

**What it measures:** random reads.

**Command:** `python -m tools.bench_reader`

**Latest figures** (2026-11-30, load 3.5):

| measure | figure |
|---|---|
| random reads | 0.46x |

**Target / status:** met.

**Machine:** this VM; load 3.5.

## Changelog

### Reader: history

```
# a comment in a code block, not a heading: 2 s
```
"""


def test_a_figure_moved_reflowed_and_relabelled_is_not_lost() -> None:
    old = "## Reader (issue #3)\n\n**What:** random reads, 2,151 vs 4,648 ns = **0.46x** of the\n[floor](#floor) on Nov 30.\n"
    new = (
        "### Reader (issue #3): history\n\n**What it measures:** random reads, 2,151 vs\n"
        "4,648 ns = 0.46x of the [floor](#somewhere-else) on Nov 30.\n"
    )
    assert lost_lines(old, new) == []


def test_a_dropped_figure_is_lost() -> None:
    old = "Latest: 0.46x at load 3.5.\nNo figure here.\n"
    assert lost_lines(old, "Latest: 0.47x at load 3.5.\n") == ["Latest: 0.46x at load 3.5."]


def test_slug_is_githubs_anchor() -> None:
    assert slug("Hugging Face / accelerate adapter (issue #19, item 4)") == (
        "hugging-face--accelerate-adapter-issue-19-item-4"
    )
    assert slug("Overlapped input in `mixle train` (issue #17, item 3)") == (
        "overlapped-input-in-mixle-train-issue-17-item-3"
    )
    assert slug("1. Open + first batch at 10^9 documents") == "1-open--first-batch-at-109-documents"


def test_repeated_headings_are_numbered_and_code_blocks_are_not_headings() -> None:
    found = anchors(PAGE + "\n### Reader: history\n")
    assert {"reader-history", "reader-history-1", "reader-issue-3"} <= found
    assert not any(anchor.startswith("a-comment") for anchor in found)


def test_the_sample_page_passes() -> None:
    assert (
        check(
            PAGE, PAGE, ["bench_reader.py"], {"README.md": "[x](docs/benchmarks.md#reader-issue-3)"}
        )
        == []
    )


def test_an_index_row_without_a_link_and_a_dangling_link_are_reported() -> None:
    page = PAGE.replace("[Reader](#reader-issue-3)", "Reader").replace(
        "**Target / status:** met.", "**Target / status:** met ([history](#gone))."
    )
    problems = link_problems(page)
    assert any(problem.startswith("Index row without a link") for problem in problems)
    assert any("#gone" in problem for problem in problems)


def test_a_script_without_a_page_or_with_two_is_reported() -> None:
    assert page_problems(PAGE, ["bench_reader.py", "bench_pack.py"]) == [
        "tools/bench_pack.py has 0 pages: []"
    ]
    twice = PAGE.replace(
        "## Changelog", "## Reader again\n\n**Script:** `tools/bench_reader.py`\n\n## Changelog"
    )
    problems = page_problems(twice, ["bench_reader.py"])
    assert "tools/bench_reader.py has 2 pages: ['Reader (issue #3)', 'Reader again']" in problems
    assert "page 'Reader again' has no **Machine...** part" in problems


def test_a_page_without_a_script_line_is_reported() -> None:
    page = PAGE.replace("**Script:** `tools/bench_reader.py`\n", "")
    assert "page 'Reader (issue #3)' names no **Script:**" in page_problems(page, [])


def test_a_link_from_another_document_to_a_renamed_anchor_is_reported() -> None:
    others = {"docs/streaming.md": "see [it](benchmarks.md#reader-issue-3-old)"}
    assert external_link_problems(PAGE, others) == [
        "docs/streaming.md:1: link to benchmarks.md#reader-issue-3-old, no such heading"
    ]


def test_the_repository_page_has_its_pages_and_every_link_lands() -> None:
    scripts, others = repository_inputs(ROOT)
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert check(page, page, scripts, others) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_repository_page_keeps_every_figure_of_main() -> None:
    try:
        old = base_text("main", ROOT)
    except subprocess.CalledProcessError:
        pytest.skip("no main branch in this checkout")
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert lost_lines(old, page) == []


def test_base_text_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "old.md"
    path.write_text("Latest: 1.0x\n", encoding="utf-8")
    assert base_text(str(path), ROOT) == "Latest: 1.0x\n"
