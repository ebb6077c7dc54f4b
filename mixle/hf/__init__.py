"""Hugging Face adapters: the global row stream for ``datasets`` / ``accelerate``, the
padding-free collate and FlexAttention document mask for packed rows, and (in
:mod:`mixle.hf.trainer`, which needs ``transformers``) exact resume inside
``transformers.Trainer``.

Hand accelerate the **global** row stream, never a per-rank one: see
:class:`GlobalRowDataset` (:mod:`mixle.hf._global_rows` tells why).
"""

from mixle.data._attention_torch import flex_document_mask, padding_free_collate
from mixle.hf._global_rows import ROW_FIELDS, GlobalRowDataset, to_iterable_dataset

__all__ = [
    "ROW_FIELDS",
    "GlobalRowDataset",
    "flex_document_mask",
    "padding_free_collate",
    "to_iterable_dataset",
]
