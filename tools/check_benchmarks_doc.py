"""Check ``docs/benchmarks.md``: nothing measured lost, every link lands, one page a script.

The page is one current section per ``tools/bench_*.py`` script with its dated history in
the Changelog at the end; when it is reorganised or a new figure moves an older one into
the Changelog, this checks that

1. every line of the earlier page that holds a digit (a figure, a date, a load, a
   commit) still appears in the new one, word for word once markup is set aside: a
   heading's ``#`` marks, a list or quote marker, bold marks, a leading label of words
   (``**What:**``, ``Command:``), a link's target (``[text](#x)`` reads as ``text``) and
   line breaks (a reflowed paragraph keeps its lines) do not count;
2. every link of the Index table, and every ``(#anchor)`` link of the page, names a
   heading of the page (GitHub's anchors: lower case, punctuation dropped, spaces to
   hyphens, ``-1``, ``-2`` for repeats);
3. every ``tools/bench_*.py`` is the ``**Script:**`` of exactly one page between the
   Index and the Changelog, and each such page has the five parts (What it measures,
   Command(s), Latest figures, Target / status, Machine);
4. every ``benchmarks.md#anchor`` link in ``docs/*.md`` and ``README.md`` names a
   heading of the page.

    python -m tools.check_benchmarks_doc                  # against `git show main:docs/benchmarks.md`
    python -m tools.check_benchmarks_doc --base old.md    # against a file

Exit status 1, with one line per problem, when a check fails.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = Path("docs/benchmarks.md")

#: The parts every benchmark page has, by the bold label that opens each.
PARTS = ("What it measures", "Command", "Latest figures", "Target / status", "Machine")
#: Pages between the Index and the Changelog that are no script's (figures of in-process
#: scripts and one-off commands).
NON_SCRIPT_PAGES = frozenset({"Other measurements"})

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)\)")
_ANCHOR_LINK = re.compile(r"\]\(#([^)\s]+)\)")
_LEADING_MARKUP = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+\.\s+)+")
_LABEL = re.compile(r"^[A-Za-z][A-Za-z /()-]{0,38}:\s+")
_SCRIPT = re.compile(r"^\*\*Script:\*\*\s*(.*)$")
_BENCH_NAME = re.compile(r"tools/(bench_\w+\.py)")
_WHITESPACE = re.compile(r"\s+")


def normalise(line: str) -> str:
    """``line`` with its markup set aside (see the module docstring, check 1)."""
    text = line.strip()
    text = _LEADING_MARKUP.sub("", text)
    text = _LINK.sub(lambda match: match.group(1), text).replace("**", "")
    text = _LABEL.sub("", text)
    return _WHITESPACE.sub(" ", text).strip()


def lost_lines(old: str, new: str) -> list[str]:
    """The lines of ``old`` that hold a digit and are not in ``new``, in order."""
    body = " ".join(normalise(line) for line in new.splitlines())
    body = _WHITESPACE.sub(" ", body)
    lost = []
    for line in old.splitlines():
        text = normalise(line)
        if any(char.isdigit() for char in text) and text not in body:
            lost.append(line)
    return lost


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the ``-1`` of a repeat)."""
    text = _LINK.sub(lambda match: match.group(1), heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str, int]]:
    """``(level, text, line number)`` of every heading outside fenced code blocks."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2), number))
    return found


def anchors(text: str) -> set[str]:
    """Every anchor the page's headings define, repeats numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    result = set()
    for _, heading, _ in headings(text):
        base = slug(heading)
        result.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return result


def sections(text: str, level: int = 2) -> list[tuple[str, str]]:
    """``(heading, body)`` of each heading of ``level``, the body up to the next one."""
    lines = text.splitlines()
    marks = [(number, heading) for depth, heading, number in headings(text) if depth == level]
    result = []
    for index, (number, heading) in enumerate(marks):
        end = marks[index + 1][0] - 1 if index + 1 < len(marks) else len(lines)
        result.append((heading, "\n".join(lines[number:end])))
    return result


def link_problems(text: str) -> list[str]:
    """Index rows and ``(#anchor)`` links that name no heading of the page."""
    known = anchors(text)
    problems = []
    for heading, body in sections(text):
        if heading != "Index":
            continue
        rows = [line for line in body.splitlines() if line.startswith("|")]
        for row in rows[2:]:  # past the header and its rule
            first = row.strip("|").split("|")[0].strip()
            if first.startswith("**"):  # a group's row
                continue
            if not re.search(r"\]\(#[^)\s]+\)", first):
                problems.append(f"Index row without a link to its page: {row[:80]}")
    for number, line in enumerate(text.splitlines(), 1):
        for anchor in _ANCHOR_LINK.findall(line):
            if anchor not in known:
                problems.append(f"line {number}: link to #{anchor}, no such heading")
    return problems


def page_problems(text: str, scripts: list[str]) -> list[str]:
    """Scripts without exactly one page; script pages that lack one of the five parts."""
    names = [heading for heading, _ in sections(text)]
    if "Index" not in names or "Changelog" not in names:
        return ["the page needs an '## Index' and a '## Changelog' section"]
    pages = sections(text)[names.index("Index") + 1 : names.index("Changelog")]
    owners: dict[str, list[str]] = {script: [] for script in scripts}
    problems = []
    for heading, body in pages:
        declared = [
            _BENCH_NAME.findall(match.group(1))
            for line in body.splitlines()
            if (match := _SCRIPT.match(line.strip()))
        ]
        if not declared:
            if heading not in NON_SCRIPT_PAGES:
                problems.append(f"page '{heading}' names no **Script:**")
            continue
        for script in (name for names_ in declared for name in names_):
            owners.setdefault(script, []).append(heading)
        for part in PARTS:
            if f"**{part}" not in body:
                problems.append(f"page '{heading}' has no **{part}...** part")
    for script, owned in sorted(owners.items()):
        if script not in scripts:
            problems.append(f"page(s) {owned} name tools/{script}, which does not exist")
        elif len(owned) != 1:
            problems.append(f"tools/{script} has {len(owned)} pages: {owned}")
    return problems


def external_link_problems(text: str, others: dict[str, str]) -> list[str]:
    """``benchmarks.md#anchor`` links in other documents that name no heading here."""
    known = anchors(text)
    problems = []
    for name, body in sorted(others.items()):
        for number, line in enumerate(body.splitlines(), 1):
            for anchor in re.findall(r"benchmarks\.md#([^)\s\"'>]+)", line):
                if anchor not in known:
                    problems.append(
                        f"{name}:{number}: link to benchmarks.md#{anchor}, no such heading"
                    )
    return problems


def check(old: str, new: str, scripts: list[str], others: dict[str, str]) -> list[str]:
    """Every problem the four checks find (empty: the page passes)."""
    problems = [f"lost: {line.strip()}" for line in lost_lines(old, new)]
    problems += link_problems(new)
    problems += page_problems(new, scripts)
    problems += external_link_problems(new, others)
    return problems


def repository_inputs(root: Path) -> tuple[list[str], dict[str, str]]:
    """The ``tools/bench_*.py`` names and the other documents' text under ``root``."""
    scripts = sorted(path.name for path in (root / "tools").glob("bench_*.py"))
    others = {
        str(path.relative_to(root)): path.read_text(encoding="utf-8")
        for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        if path.exists() and path.resolve() != (root / DOC).resolve()
    }
    return scripts, others


def base_text(base: str, root: Path) -> str:
    """The earlier page: the file ``base`` when it exists, else ``git show base:docs/...``."""
    if Path(base).is_file():
        return Path(base).read_text(encoding="utf-8")
    return subprocess.run(
        ["git", "show", f"{base}:{DOC.as_posix()}"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--base", default="main", help="a git revision or a file: the earlier page (main)"
    )
    parser.add_argument("--doc", default=str(ROOT / DOC), help="the page to check")
    args = parser.parse_args(argv)
    scripts, others = repository_inputs(ROOT)
    new = Path(args.doc).read_text(encoding="utf-8")
    problems = check(base_text(args.base, ROOT), new, scripts, others)
    for problem in problems:
        print(problem)
    pages = len(sections(new))
    print(
        f"{'FAIL' if problems else 'ok'}: {len(problems)} problem(s); {pages} sections, "
        f"{len(scripts)} bench scripts, {len(new.splitlines())} lines"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
