"""Hugging Face adapters: the global row stream for ``datasets`` / ``accelerate``, and
(in :mod:`mixle.hf.trainer`, which needs ``transformers``) exact resume inside
``transformers.Trainer``.

Hand accelerate the **global** row stream, never a per-rank one: see
:class:`GlobalRowDataset` (:mod:`mixle.hf._global_rows` tells why).
"""

from mixle.hf._global_rows import ROW_FIELDS, GlobalRowDataset, to_iterable_dataset

__all__ = ["ROW_FIELDS", "GlobalRowDataset", "to_iterable_dataset"]
