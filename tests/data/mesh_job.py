"""Rank program for tests/data/test_mesh.py: a 4-rank (2, 2) CPU mesh under torchrun (gloo).

``mesh_job.py tp``: mesh ``("dp", "tp")``. Every stream and adapter built with
``mesh=, dp_dims="dp"`` (``StreamingCorpus`` and ``for_current_rank``, ``TokenStream``,
``Mixture``, ``StreamingDataset``) writes its first batches; a ``DcpLoaderState(mesh=)``
checkpoint saved after two batches is loaded into a fresh dataset (the next batches),
then into one whose mesh dims give another data-parallel size, and into another stream
(the errors). A dataset over a corpus built from the global rank is refused.

``mesh_job.py cp``: mesh ``("dp", "cp")``. Each rank cuts its corpus batch with
``context_parallel_batch`` (contiguous and zig-zag); the context-parallel group gathers
the parts and puts them back at their ``context_parallel_indices``.

Each rank writes ``out.json`` to its output folder.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from mixle.data import (
    DcpLoaderState,
    Mixture,
    MixtureSource,
    StreamingCorpus,
    TokenStream,
    context_parallel_batch,
    context_parallel_indices,
    data_parallel_place,
)
from mixle.data.torch import StreamingDataset
from mixle.errors import ArgumentError, StateMismatchError
from tests._torchrun import OUTPUT_ENV, rank_output_dir

DOCUMENTS = [np.arange(1 + i, 5 + i + i % 7, dtype=np.int64) for i in range(40)]


def _corpus(mesh: DeviceMesh, dims: Any = "dp", **kw: Any) -> StreamingCorpus:
    kw = {"block": 4, "batch_size": 2, "seed": 1, **kw}
    return StreamingCorpus(DOCUMENTS, mesh=mesh, dp_dims=dims, **kw)


def _contexts(batches: Any, count: int) -> list[Any]:
    return [next(batches)[0].tolist() for _ in range(count)]


def _error(action: Any) -> str:
    try:
        action()
    except (ArgumentError, StateMismatchError) as error:
        return str(error)
    return ""


def tensor_parallel(mesh: DeviceMesh) -> dict[str, Any]:
    out: dict[str, Any] = {"place": list(data_parallel_place(mesh, "dp"))}
    corpus = _corpus(mesh)
    out["corpus"] = [b.context.tolist() for _, b in zip(range(3), corpus.batches(), strict=False)]
    current = StreamingCorpus.for_current_rank(
        DOCUMENTS, mesh=mesh, dp_dims="dp", block=4, batch_size=2, seed=1
    )
    out["for_current_rank"] = [current.shard.rank, current.shard.world_size]
    tokens = TokenStream(DOCUMENTS, 4, 2, mesh=mesh, dp_dims="dp")
    out["token_stream"] = [
        b.context.tolist() for _, b in zip(range(2), tokens.batches(), strict=False)
    ]
    sources = [MixtureSource(DOCUMENTS[:20], 1.0, "a"), MixtureSource(DOCUMENTS[20:], 1.0, "b")]
    mixture = Mixture(sources, block=4, batch_size=2, mesh=mesh, dp_dims="dp")
    out["mixture"] = [b.context.tolist() for _, b in zip(range(2), mixture.batches(), strict=False)]
    out["global_rank_refused"] = _error(
        lambda: StreamingDataset(
            StreamingCorpus(DOCUMENTS, rank=dist.get_rank(), world_size=4, block=4, batch_size=2),
            mesh=mesh,
            dp_dims="dp",
        )
    )
    # DCP: a per-rank loader state saved after two batches, loaded into a fresh job's dataset.
    checkpoint = Path(os.environ[OUTPUT_ENV]) / "dcp"
    dataset = StreamingDataset(_corpus(mesh), mesh=mesh, dp_dims="dp")
    batches = iter(dataset)
    _contexts(batches, 2)
    dcp.save({"loader": DcpLoaderState(dataset, mesh=mesh, dp_dims="dp")}, checkpoint_id=checkpoint)
    out["after_save"] = _contexts(batches, 2)
    fresh = StreamingDataset(_corpus(mesh), mesh=mesh, dp_dims="dp")
    dcp.load({"loader": DcpLoaderState(fresh, mesh=mesh, dp_dims="dp")}, checkpoint_id=checkpoint)
    out["after_load"] = _contexts(iter(fresh), 2)
    other_stream = StreamingDataset(_corpus(mesh, seed=2))
    state = {"loader": DcpLoaderState(other_stream, mesh=mesh, dp_dims="dp")}
    out["other_stream"] = _error(lambda: dcp.load(state, checkpoint_id=checkpoint))
    # The same checkpoint read where the mesh dims make every rank data-parallel (4 ranks).
    wide = StreamingDataset(_corpus(mesh, ("dp", "tp")))
    dist.barrier()
    second = Path(os.environ[OUTPUT_ENV]) / "dcp-wide"
    dcp.save(
        {"loader": DcpLoaderState(wide, mesh=mesh, dp_dims=("dp", "tp"))}, checkpoint_id=second
    )
    narrow = {"loader": DcpLoaderState(StreamingDataset(_corpus(mesh)), mesh=mesh, dp_dims="dp")}
    out["other_mesh"] = _error(lambda: dcp.load(narrow, checkpoint_id=second))
    return out


def context_parallel(mesh: DeviceMesh) -> dict[str, Any]:
    cp_rank, cp_size = mesh.get_local_rank("cp"), mesh.size(mesh.mesh_dim_names.index("cp"))
    batch = next(_corpus(mesh, block=8, document_ids=True, boundary_id=0).batches())
    out: dict[str, Any] = {"batch": {k: v.tolist() for k, v in batch.to_dict().items()}}
    for zigzag in (False, True):
        part = context_parallel_batch(batch, cp_rank, cp_size, zigzag=zigzag)
        parts: list[Any] = [None] * cp_size
        dist.all_gather_object(parts, part.to_dict(), group=mesh.get_group("cp"))
        whole = {name: np.zeros_like(value) for name, value in batch.to_dict().items()}
        for peer, fields in enumerate(parts):
            index = context_parallel_indices(8, peer, cp_size, zigzag=zigzag)
            for name, value in fields.items():
                whole[name][..., index] = value
        out[f"zigzag{int(zigzag)}"] = {
            "mine": {k: v.tolist() for k, v in part.to_dict().items()},
            "reassembled": {k: v.tolist() for k, v in whole.items()},
        }
    return out


def main() -> int:
    kind = sys.argv[1]
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", kind))
    result = tensor_parallel(mesh) if kind == "tp" else context_parallel(mesh)
    (rank_output_dir() / "out.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    os._exit(code)
