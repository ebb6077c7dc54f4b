"""Every dotted ``mixle.`` name the docs cite exists: a doc can never cite a missing name.

From README.md and docs/*.md, inside inline code and code blocks: every dotted name that
starts with ``mixle.`` (module paths, ``module.attr``, ``module.Class.method``), every
name imported by ``from mixle... import a, b`` in a code block, and every
``Class.attr`` whose ``Class`` is a class a public module exports (``Mixture.rows_at``,
``StreamingCorpus.epoch_batches``; dataclass fields and annotated attributes count). From the package's
docstrings: every Sphinx cross-reference (``:class:`mixle...```, ``:func:``...). Each is
imported (the longest prefix that is a module) and resolved attribute by attribute; a
failure names the file and the name.
"""

from __future__ import annotations

import importlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mixle._options import Sectioned
from tests.architecture.test_public_api import EXPECTED

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_DOTTED = re.compile(r"(?<![\w./-])mixle(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(
    r"^\s*(?:>>> )?from\s+(mixle(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M
)
_CLASS_ATTR = re.compile(r"(?<![\w.])([A-Z]\w*)\.([A-Za-z_]\w*)")
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`~?(mixle(?:\.\w+)+)`")


def code_spans(markdown: str) -> Iterator[str]:
    """The fenced code blocks of ``markdown``, then its inline code spans."""
    for block in _FENCE.finditer(markdown):
        yield block.group(0)
    for span in _INLINE.finditer(_FENCE.sub("", markdown)):
        yield span.group(2)


def cited_names(markdown: str) -> set[str]:
    """Every ``mixle.`` name cited in the code of ``markdown`` (see the module docstring)."""
    names: set[str] = set()
    for code in code_spans(markdown):
        names.update(_DOTTED.findall(code))
        for module, imported in _FROM_IMPORT.findall(code):
            for item in imported.strip("()").split(","):
                name = item.split(" as ")[0].strip()
                if name and name != "*":
                    names.add(f"{module}.{name}")
    return names


def public_classes() -> dict[str, type]:
    """Every class exported by a public module (see test_public_api), by its name."""
    classes: dict[str, type] = {}
    for module in EXPECTED:
        loaded = importlib.import_module(module)
        for name in loaded.__all__:
            value = getattr(loaded, name)
            if isinstance(value, type):
                classes.setdefault(name, value)
    return classes


def _has_member(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    if issubclass(cls, Sectioned) and name in cls.option_names():  # config.d_model
        return True
    return any(
        name in getattr(base, "__annotations__", {}) or name in getattr(base, "__slots__", ())
        for base in cls.__mro__
    )


def missing_class_members(markdown: str, classes: dict[str, type]) -> list[str]:
    """``Class.attr`` spans of ``markdown`` naming a public class that has no ``attr``."""
    cited = {
        pair
        for code in code_spans(markdown)
        for pair in _CLASS_ATTR.findall(code)
        if pair[0] in classes
    }
    return sorted(f"{c}.{a}" for c, a in cited if not _has_member(classes[c], a))


def resolve(name: str) -> Any:
    """The object ``name`` denotes; raises ImportError or AttributeError if none."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found: Any = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module.startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(f"no module {parts[0]}")


def _failures(names: set[str]) -> list[str]:
    failures = []
    for name in sorted(names):
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            failures.append(f"{name} ({type(exc).__name__}: {exc})")
    return failures


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_mixle_name_a_doc_cites_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    failures = _failures(cited_names(text))
    failures += [f"{n} (no such member)" for n in missing_class_members(text, CLASSES)]
    assert not failures, f"{doc.relative_to(ROOT)} cites names that do not exist: " + "; ".join(
        failures
    )


CLASSES = public_classes()


def test_every_cross_reference_in_a_docstring_exists() -> None:
    failures = [
        f"{path.relative_to(ROOT)}: {failure}"
        for path in sorted((ROOT / "mixle").rglob("*.py"))
        for failure in _failures(set(_ROLE.findall(path.read_text(encoding="utf-8"))))
    ]
    assert not failures, "docstrings cite names that do not exist: " + "; ".join(failures)


def test_the_docs_cite_names_at_all() -> None:
    # Guards the extraction itself: the docs name dozens of mixle objects.
    assert len(set().union(*(cited_names(d.read_text(encoding="utf-8")) for d in DOCS))) > 40


def test_a_missing_name_is_caught_in_every_place_a_doc_can_cite_it() -> None:
    markdown = "\n".join(
        [
            "Prose mentions mixle.nowhere without code: not checked.",
            "Inline: `mixle.data.NoSuchClass` and `mixle.data.Mixture.no_such_method()`.",
            "```python",
            "from mixle.corpus import (",
            "    open_corpus,",
            "    no_such_function,",
            ")",
            "import mixle.no_such_module",
            "```",
            "Fine: `mixle.data.Mixture.state_dict`, `python -m mixle.cli`.",
        ]
    )
    names = cited_names(markdown)
    assert "mixle.nowhere" not in names
    failures = " ".join(_failures(names))
    for missing in (
        "mixle.data.NoSuchClass",
        "mixle.data.Mixture.no_such_method",
        "mixle.corpus.no_such_function",
        "mixle.no_such_module",
    ):
        assert missing in failures
    for present in ("mixle.corpus.open_corpus", "mixle.data.Mixture.state_dict", "mixle.cli"):
        assert present in names and present not in failures
    bare = "`Mixture.rows_at(0, 8)`, `MixtureSource.weight`, `Mixture.no_such_verb`, `np.where`"
    assert missing_class_members(bare, CLASSES) == ["Mixture.no_such_verb"]


def test_the_plan_store_example_in_streaming_md_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = (ROOT / "docs" / "streaming.md").read_text(encoding="utf-8")
    section = text.split("## The plan store", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, re.S)
    assert example is not None
    monkeypatch.chdir(ROOT)  # the example reads shards/sample
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # and plans under mkdtemp()
    exec(compile(example.group(1), "docs/streaming.md (the plan store)", "exec"), {})
