"""The package's layering, checked on the source (AST, no imports executed).

Layers, bottom to top (a module may import its own layer and the layers below):

1. ``mixle.errors``, ``mixle._arrays``, ``mixle._checks``, ``mixle._file_checks``,
   ``mixle._options``, ``mixle._io``, ``mixle._optional``, ``mixle._safe_json``,
   ``mixle._version`` - shared leaves;
2. ``mixle.data`` - pure iteration logic (never the corpus, training or CLI);
3. ``mixle.corpus.format`` - the on-disk format, writers and the reader;
4. ``mixle.corpus.storage`` - where a corpus lives (local, fsspec, cache, zarr);
5. ``mixle.corpus.ingestion`` and ``mixle.corpus.export`` - build corpora;
6. ``mixle.corpus`` (the facade), ``mixle.stats``, ``mixle.models``, ``mixle.hf``,
   ``mixle.lightning``, ``mixle.olmo``;
7. ``mixle.train``, ``mixle.provenance``;
8. ``mixle.cli``.

Subpackages import their siblings' modules directly, never the ``mixle.corpus``
facade. No import cycles between modules, and no imports of mixle modules inside
functions (the way cycles get hidden). Type-only imports under ``TYPE_CHECKING``
are not runtime edges and are exempt; a facade's lazy ``_HOMES`` table (name -> module,
:mod:`mixle._lazy`) is read as import edges, since ``__getattr__`` imports those modules. The CLI is exempt from the function-local rule
only: it defers loading a subcommand's library (torch for ``train``) until that
subcommand runs, so ``mixle --help`` stays fast.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mixle"

LAYERS: list[tuple[str, ...]] = [
    (
        "mixle.errors",
        "mixle._arrays",
        "mixle._gather",
        "mixle._checks",
        "mixle._lazy",
        "mixle._file_checks",
        "mixle._options",
        "mixle._safe_json",
        "mixle._io",
        "mixle._optional",
        "mixle._version",
    ),
    ("mixle.data",),
    ("mixle.corpus.format",),
    ("mixle.corpus.storage",),
    ("mixle.corpus.ingestion", "mixle.corpus.export"),
    (
        "mixle.corpus",
        "mixle.stats",
        "mixle.models",
        "mixle.hf",
        "mixle.lightning",
        "mixle.olmo",
        "mixle.testing",
    ),
    ("mixle.train", "mixle.provenance"),
    ("mixle.cli", "mixle"),
]
LAZY_IMPORTS_ALLOWED = ("mixle.cli",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _lazy_homes(node: ast.AST) -> list[str]:
    """The modules a facade's ``_HOMES: dict[str, str] = {name: module}`` table names."""
    if isinstance(node, ast.AnnAssign | ast.Assign):
        targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
        if any(isinstance(t, ast.Name) and t.id == "_HOMES" for t in targets):
            assert isinstance(node.value, ast.Dict), "_HOMES must be a dict literal"
            return [v.value for v in node.value.values if isinstance(v, ast.Constant)]
    return []


def _imports(module: str) -> Iterator[tuple[str, int, bool]]:
    """``(imported mixle module, line, inside a function)`` for each runtime import.

    A module-level ``_HOMES`` table counts: each module it names is imported on first
    use of its name (:mod:`mixle._lazy`).
    """
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from visit(other, in_function)
                continue
            for home in _lazy_homes(child):
                yield home, child.lineno, in_function
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, in_function
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    candidate = f"{base}.{alias.name}"
                    yield (candidate if candidate in MODULES else base), child.lineno, in_function
            nested = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from visit(child, nested)

    for name, line, in_function in visit(tree, False):
        if name == "mixle" or name.startswith("mixle."):
            yield name, line, in_function


def _layer(module: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = index, len(prefix)
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


GRAPH = {module: sorted({name for name, _, _ in _imports(module)}) for module in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module: str) -> None:
    higher = [name for name in GRAPH[module] if _layer(name) > _layer(module)]
    assert not higher, f"{module} (layer {_layer(module)}) imports higher layers: {higher}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mixle.corpus.")))
def test_corpus_subpackages_never_import_the_facade(module: str) -> None:
    assert "mixle.corpus" not in GRAPH[module], f"{module} imports the mixle.corpus facade"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("mixle.data")))
def test_data_layer_never_imports_corpus_train_or_cli(module: str) -> None:
    banned = ("mixle.corpus", "mixle.train", "mixle.cli", "mixle.models", "mixle.stats")
    found = [n for n in GRAPH[module] if any(n == b or n.startswith(b + ".") for b in banned)]
    assert not found, f"{module} imports {found}"


def test_cli_uses_only_public_corpus_api() -> None:
    private = [
        (module, name)
        for module in MODULES
        if module.startswith("mixle.cli")
        for name in GRAPH[module]
        if name.startswith("mixle.corpus.")
    ]
    assert not private, f"the CLI imports private corpus modules: {private}"


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if not m.startswith(LAZY_IMPORTS_ALLOWED))
)
def test_no_function_local_imports_of_mixle_modules(module: str) -> None:
    local = [(name, line) for name, line, in_function in _imports(module) if in_function]
    assert not local, f"{module} imports mixle modules inside functions: {local}"


def test_no_import_cycles() -> None:
    # Edges to a package's __init__ are edges to the facade module itself; a cycle is
    # a strongly connected component of more than one module (Tarjan).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, []):
            if target not in MODULES:
                continue
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            connect(module)
    assert not cycles, f"import cycles: {cycles}"


def test_a_planted_violation_is_caught(tmp_path: Path) -> None:
    """The checks above can fail: a data module importing the corpus is reported."""
    global MODULES, GRAPH
    saved = MODULES, GRAPH
    fake = PACKAGE / "data" / "_planted_violation.py"
    MODULES = {**MODULES, "mixle.data._planted_violation": tmp_path / "p.py"}
    (tmp_path / "p.py").write_text(
        "from mixle.corpus.format.documents import ShardedDocuments\n"
        "def f():\n    import mixle.train\n"
    )
    try:
        GRAPH = {
            **GRAPH,
            "mixle.data._planted_violation": sorted(
                {n for n, _, _ in _imports("mixle.data._planted_violation")}
            ),
        }
        with pytest.raises(AssertionError, match="imports"):
            test_data_layer_never_imports_corpus_train_or_cli("mixle.data._planted_violation")
        with pytest.raises(AssertionError, match="inside functions"):
            test_no_function_local_imports_of_mixle_modules("mixle.data._planted_violation")
    finally:
        MODULES, GRAPH = saved
    assert not fake.exists()


def test_lazy_facade_tables_are_import_edges() -> None:
    """``mixle.corpus`` loads ``ingest`` lazily, yet the graph sees the edge to its module."""
    assert "mixle.corpus.ingestion.pipeline" in GRAPH["mixle.corpus"]
    assert "mixle.train._trainer" in GRAPH["mixle.train"]
