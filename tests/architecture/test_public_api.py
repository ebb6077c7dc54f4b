"""A snapshot of every public module's ``__all__``: a change to a face is made on purpose.

Public modules are every package of ``mixle`` except the corpus's internal subpackages
(their public names are re-exported by ``mixle.corpus``), plus every module without a
leading underscore directly in ``mixle/``, ``mixle/data/`` and ``mixle/hf/``
(``mixle.errors``, ``mixle.data.torch``, ``mixle.hf.trainer``...). Each has an explicit ``__all__`` whose names all
resolve, and that ``__all__`` equals its line in :data:`EXPECTED` below. Changing a face
means changing that one line: the failure message prints the line to paste.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from mixle.corpus import PlanFiles, ShardLoader, open_corpus
from mixle.corpus.format.shard_loader import MappedShards
from mixle.corpus.storage.range_documents import RangeShards
from mixle.data import DocumentSource, ExactSchedule, MixingRule, PlanStore, TemperatureSchedule

PACKAGE = Path(__file__).resolve().parents[2] / "mixle"

INTERNAL_PACKAGES = ("mixle.corpus.format", "mixle.corpus.ingestion", "mixle.corpus.storage")

# One line per public module: its __all__, sorted, space-separated.
EXPECTED: dict[str, str] = {
    "mixle": "__version__",
    "mixle.cli": "main",
    "mixle.corpus": "BLOCK_OFFSETS_NAME CachedDocuments CorpusError CorpusShape CorpusWriter DEFAULT_CHUNK_BYTES DEFAULT_MAX_OPEN_SHARDS DEFAULT_SHARD_MAX_BYTES DEFAULT_UNIT_BYTES DOCUMENT_OFFSETS_NAME DocumentsView EXPORT_FORMATS ExportSummary FORMAT_VERSION INPUT_FORMATS IngestOptions IngestOutput IngestPlan IngestRun IngestSummary InputFormat MANIFEST_NAME Manifest ORIGINS_NAME Origin PlanFiles RangeDocuments RemoteError RemoteStore ShardArrays ShardCache ShardEntry ShardLoader ShardReport ShardStore ShardWriter ShardedDocuments VerifyReport add_block_offsets add_document_offsets add_sidecars commit_ingest commit_manifest convert_corpus describe_corpus export_corpus format_names ingest input_formats merge_corpora open_corpus plan_ingest plot_lengths publish_corpus register_backend register_format run_unit sidecar_status stored_bytes upload_corpus verify_corpus write_shard",
    "mixle.corpus.export": "DEFAULT_CHUNK_BYTES EXPORT_FORMATS ExportSummary export_corpus",
    "mixle.data": "Batch BlockPhase BlockSchedule DcpLoaderState DocumentSource ExactSchedule LengthBandit MixingRule Mixture MixturePhase MixtureSource PackOptions PackedCorpus PackingOptions PackingSummary PlanStore ResumableStream RowPlan RowSchedule ShardOptions Sighting SourceAccount SourceBudget StreamingCorpus TemperatureSchedule TokenStream VariableLengthStream attention_boundaries compare_packings context_parallel_batch context_parallel_indices context_parallel_slice data_parallel_place gather_backend global_document_order pack_documents register_layout set_gather_backend shard_documents_for_rank sightings stream_token_source",
    "mixle.data.stream_token_source": "TokenStream stream_token_source",
    "mixle.data.streaming_corpus": "PackedCorpus SequenceSelector StreamingCorpus current_rank_and_world_size global_document_order pack_documents shard_documents_for_rank",
    "mixle.data.torch": "PackedBatch StreamDataset StreamLoader StreamingDataset TokenStreamDataset",
    "mixle.errors": "ArgumentError ArgumentTypeError CheckpointError ChecksumError CorpusError CorpusExistsError CorpusFormatError CorpusNotFoundError DescriptorLimitError ExportError IngestError MissingBackendError MixleError OutputInUseError RemoteError RevisionMismatchError StateMismatchError TokenIdError UnsafePathError UnsupportedStoreOperation redact_userinfo",
    "mixle.hf": "GlobalRowDataset ROW_FIELDS flex_document_mask padding_free_collate to_iterable_dataset",
    "mixle.lightning": "StreamDataModule",
    "mixle.olmo": "LABEL_IGNORE_INDEX OlmoDataLoader",
    "mixle.hf.trainer": "IGNORE_INDEX LoaderStateCallback TRAINER_SETTINGS causal_lm_collate",
    "mixle.models": "CategoricalEmbedding CausalTransformerLM StreamingDocumentEncoder StreamingGradientState StreamingTokenEncoder StreamingTransformer StreamingTransformerAccumulator StreamingTransformerAccumulatorFactory StreamingTransformerEstimator StreamingTransformerLeaf StreamingTransformerLeafEstimator StreamingTransformerSampler TokenDocuments TokenPairs TransformerLMEstimator stream_fit",
    "mixle.provenance": "BYTES BatchId Decoder DocumentSightings DocumentSpan RankRows RowReport RunRecord RunSpec ShowOptions StepReport WhereOptions WhereReport load_decoder render_step render_where resolve_run show_step where",
    "mixle.testing": "StoreContract VirtualDocuments assert_documents_contract assert_gather_contract shard_starts",
    "mixle.stats": "CategoricalAccumulator CategoricalAccumulatorFactory CategoricalDistribution CategoricalEmbedding CategoricalEncoder CategoricalEstimator CategoricalSampler CompositeAccumulator CompositeAccumulatorFactory CompositeDistribution CompositeEncoder CompositeEncoding CompositeEstimator CompositeSampler DataSequenceEncoder DistributionSampler EmbeddingTiedDistribution EmbeddingTiedEstimator LiveEstimator MixtureAccumulator MixtureAccumulatorFactory MixtureDistribution MixtureEstimator MixtureSampler MixtureStatistic ParameterEstimator SequenceEncodableProbabilityDistribution SequenceEncodableStatisticAccumulator SharedEmbedding StatisticAccumulatorFactory as_weights document_batches estimate_partitions from_dict partitioned_estimate register registered_types stream_em tensors_from_blob tensors_to_blob to_dict",
    "mixle.train": "Checkpoint CheckpointConfig DataConfig MetricsLog MixtureBatches ModelConfig OBJECTIVES OptimizerConfig PackedBatches RuntimeConfig TrainConfig TrainSummary WindowBatches batch_digest budget_table latest_checkpoint list_checkpoints open_mixture plot_losses read_checkpoint read_metrics split_holdout train write_checkpoint",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def public_modules() -> list[str]:
    """The public modules by the rule in the module docstring, from the source tree."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if any(part.startswith("_") for part in name.split(".")[1:]):
            continue
        if path.name == "__init__.py":
            if not name.startswith(INTERNAL_PACKAGES):
                found.add(name)
        elif path.parent in (PACKAGE, PACKAGE / "data", PACKAGE / "hf"):
            found.add(name)
    return sorted(found)


def snapshot_line(module: str, names: list[str]) -> str:
    return f'    "{module}": "{" ".join(sorted(names))}",'


def test_every_public_module_has_a_snapshot_line() -> None:
    missing = [m for m in public_modules() if m not in EXPECTED]
    stale = [m for m in EXPECTED if m not in public_modules()]
    assert not missing, "public modules without a line in EXPECTED: " + ", ".join(missing)
    assert not stale, "EXPECTED lists modules that are not public (or gone): " + ", ".join(stale)


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_all_is_explicit_and_every_name_resolves(module: str) -> None:
    path = PACKAGE.parent.joinpath(*module.split("."))
    source = (path / "__init__.py") if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in ([node.target] if not isinstance(node, ast.Assign) else node.targets)
        if isinstance(target, ast.Name)
    }
    assert "__all__" in assigned, f"{module} has no explicit __all__"
    loaded = importlib.import_module(module)
    names = list(loaded.__all__)
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    unresolved = [name for name in names if not hasattr(loaded, name)]
    assert not unresolved, f"{module}.__all__ names what it does not define: {unresolved}"


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_all_matches_the_snapshot(module: str) -> None:
    names = list(importlib.import_module(module).__all__)
    expected = EXPECTED[module].split()
    added = sorted(set(names) - set(expected))
    removed = sorted(set(expected) - set(names))
    assert not added and not removed, (
        f"the face of {module} changed (added: {added or '-'}; removed: {removed or '-'}). "
        "If that is intended, replace its line in EXPECTED "
        f"(tests/architecture/test_public_api.py) with:\n{snapshot_line(module, names)}"
    )


def test_a_changed_face_is_reported_with_the_line_to_paste(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXPECTED, "mixle.errors", EXPECTED["mixle.errors"] + " RetiredError")
    with pytest.raises(
        AssertionError, match=r"removed: \[.RetiredError.\].*\n\s+\"mixle.errors\": "
    ):
        test_all_matches_the_snapshot("mixle.errors")


def test_the_public_contracts_are_met_by_the_implementations(tmp_path: Path) -> None:
    assert isinstance(PlanFiles(tmp_path), PlanStore)
    assert isinstance(open_corpus(PACKAGE.parent / "shards" / "sample"), DocumentSource)
    assert issubclass(MappedShards, ShardLoader) and issubclass(RangeShards, ShardLoader)
    assert isinstance(ExactSchedule(), MixingRule)
    assert isinstance(TemperatureSchedule(alpha=0.5), MixingRule)
    assert not isinstance(object(), PlanStore) and not isinstance(object(), MixingRule)
