"""Facades load lazily: ``import mixle.corpus`` and the read path stay light (issue #29).

One fresh interpreter imports :mod:`mixle.corpus`, records which modules are loaded,
then opens a corpus, reads a document and draws the first ``StreamingCorpus`` batch,
and records again: neither step may load the ingest, export or (for the import)
remote-storage code, nor the heavy optional dependencies.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mixle.corpus
import mixle.data
import mixle.provenance
import mixle.train
from mixle.corpus import CorpusWriter

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("fsspec", "s3fs", "zarr", "pyarrow", "tokenizers", "tqdm", "torch")
BUILDERS = ("mixle.corpus.ingestion", "mixle.corpus.export")

_CHILD = """
import json, sys
def loaded():
    return sorted(m for m in sys.modules if m.startswith("mixle") or m.split(".")[0] in {heavy})
import mixle.corpus
after_import = loaded()
from mixle.data import StreamingCorpus
docs = mixle.corpus.open_corpus(sys.argv[1])
docs[0]
next(iter(StreamingCorpus(docs, rank=0, world_size=1, block=8, batch_size=2)))
print(json.dumps({{"import": after_import, "first_batch": loaded()}}))
"""


def _builders_or_heavy(modules: list[str]) -> list[str]:
    return [
        m for m in modules if m.startswith(BUILDERS) or m.split(".")[0] in HEAVY or m == "asyncio"
    ]


def test_import_and_first_batch_load_no_ingest_export_or_heavy_modules(tmp_path: Path) -> None:
    with CorpusWriter(tmp_path / "c", dtype=np.uint16) as writer:
        writer.add_flat(np.arange(60, dtype=np.uint16), np.full(10, 6))
    child = _CHILD.format(heavy=set(HEAVY))
    done = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    loaded = json.loads(done.stdout)
    assert not _builders_or_heavy(loaded["import"]), loaded["import"]
    assert not [m for m in loaded["import"] if m.startswith("mixle.corpus.")], loaded["import"]
    assert not _builders_or_heavy(loaded["first_batch"])
    assert "mixle.corpus.storage.open" in loaded["first_batch"]  # the check saw the read


@pytest.mark.parametrize("facade", [mixle.corpus, mixle.data, mixle.provenance, mixle.train])
def test_every_public_name_resolves_and_is_listed(facade: object) -> None:
    names = facade.__all__  # type: ignore[attr-defined]
    for name in names:
        value = getattr(facade, name)
        assert getattr(facade, name) is value  # cached, not re-imported
    assert set(names) <= set(dir(facade))


def test_an_unknown_name_raises_attribute_error_naming_the_facade() -> None:
    with pytest.raises(AttributeError, match=r"'mixle\.corpus' has no attribute 'ingestt'"):
        _ = mixle.corpus.ingestt  # type: ignore[attr-defined]


def test_a_function_named_like_its_module_stays_the_function() -> None:
    import mixle.data.stream_token_source  # binds the submodule when lazy

    assert callable(mixle.data.stream_token_source)
    assert mixle.data.stream_token_source.__name__ == "stream_token_source"
