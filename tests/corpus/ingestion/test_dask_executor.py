"""``--executor dask``: a real ``distributed.LocalCluster`` on 127.0.0.1.

The corpus must equal the local run file for file; a worker killed (SIGKILL) in the
middle of a unit is replaced and the unit retried with the same result; a scheduler
that cannot be reached fails fast with a clear error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mixle.corpus import ORIGINS_NAME, Origin, ingest, open_corpus
from mixle.errors import IngestError
from tests.corpus.ingest_helpers import random_docs, write_jsonl
from tests.corpus.ingestion.distributed_helpers import OPTIONS, make_inputs, run_cli, tree

distributed = pytest.importorskip("distributed")

WORK = ".mixle-ingest"


@pytest.fixture(scope="module")
def cluster() -> Any:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
        silence_logs=40,
    ) as local:
        yield local


def test_local_cluster_equals_the_local_run(tmp_path: Path, cluster: Any) -> None:
    inputs = make_inputs(tmp_path)
    local = tmp_path / "local"
    ingest(inputs, local, workers=2, **OPTIONS)
    out = tmp_path / "dask"
    summary = ingest(inputs, out, executor="dask", scheduler=cluster.scheduler_address, **OPTIONS)
    assert tree(out) == tree(local)
    assert summary.documents == 300
    assert not (out / WORK).exists()


@pytest.mark.slow  # short form: test_origin_ids.py's task-array test (the same unit files)
def test_dask_units_give_the_origins_and_ids_of_the_local_run(tmp_path: Path, cluster: Any) -> None:
    path = tmp_path / "ids.jsonl"
    path.write_text(
        "".join(json.dumps({"input_ids": [n], "key": f"k{n}"}) + "\n" for n in range(200))
    )
    options = dict(OPTIONS, unit_size=600, id_field="key")
    ingest([str(path)], tmp_path / "local", **options)
    out = tmp_path / "dask"
    ingest([str(path)], out, executor="dask", scheduler=cluster.scheduler_address, **options)
    local, dask = open_corpus(tmp_path / "local"), open_corpus(out)
    assert [dask.origin(i) for i in range(200)] == [local.origin(i) for i in range(200)]
    assert dask.origin(150) == Origin(str(path), "line", 150, "k150")
    assert (out / ORIGINS_NAME).read_bytes() == (tmp_path / "local" / ORIGINS_NAME).read_bytes()


def test_the_dask_cli_with_its_own_local_cluster_equals_the_local_run(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path, seed=21)
    local = tmp_path / "local"
    ingest(inputs, local, workers=1, **OPTIONS)
    out = tmp_path / "dask"
    flags = ["--unit-size", "2048", "--shard-size", "1024", "--vocab-size", "1000", "-q"]
    run_cli("ingest", *inputs, str(out), "--executor", "dask", "--workers", "2", *flags)
    assert tree(out) == tree(local)


def test_a_worker_killed_mid_unit_is_retried_and_the_result_is_identical(
    tmp_path: Path, cluster: Any
) -> None:
    # Big units (about 3 MB of JSONL each) so a unit is still running when it is killed.
    paths = []
    for number in range(2):
        docs = random_docs(40 + number, 6000, vocab=60000, max_len=200)
        paths.append(str(write_jsonl(tmp_path / f"big-{number}.jsonl", docs)))
    options = {"unit_size": 3 * 2**20, "shard_size": 2**20, "vocab_size": 60000}
    local = tmp_path / "local"
    ingest(paths, local, workers=1, **options)
    out = tmp_path / "dask"
    killed: list[int] = []
    with distributed.Client(cluster.scheduler_address) as client:
        worker_pids = set(client.run(os.getpid).values())

    def kill_first_worker_seen_mid_unit() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            work = out / WORK
            for entry in work.glob("unit-*.tmp-*") if work.exists() else ():
                pid = int(entry.name.split(".tmp-")[1].split("-")[0])
                final = work / entry.name.split(".tmp-")[0]
                if pid in worker_pids and not final.exists():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_first_worker_seen_mid_unit)
    killer.start()
    ingest(paths, out, executor="dask", scheduler=cluster.scheduler_address, **options)
    killer.join()
    assert killed, "no unit was caught mid-way"
    assert tree(out) == tree(local)
    with distributed.Client(cluster.scheduler_address) as client:
        client.wait_for_workers(2, timeout=60)
        assert killed[0] not in set(client.run(os.getpid).values())  # really replaced


def test_an_unreachable_scheduler_fails_fast_with_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inputs = make_inputs(tmp_path)
    started = time.monotonic()
    with pytest.raises(
        IngestError, match=f"cannot reach the dask scheduler at tcp://127.0.0.1:{port} within 2 s"
    ):
        ingest(
            inputs,
            tmp_path / "out",
            executor="dask",
            scheduler=f"tcp://127.0.0.1:{port}",
            scheduler_timeout=2,
            **OPTIONS,
        )
    assert time.monotonic() - started < 30
    with pytest.raises(IngestError, match="neither an address"):
        ingest(
            inputs,
            tmp_path / "o2",
            executor="dask",
            scheduler=str(tmp_path / "nofile.json"),
            **OPTIONS,
        )


def test_a_missing_dask_gives_an_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(IngestError, match=r"pip install 'mixle\[dask\]'"):
        ingest(make_inputs(tmp_path), tmp_path / "out", executor="dask", **OPTIONS)
