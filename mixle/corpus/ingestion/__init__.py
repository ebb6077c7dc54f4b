"""Ingestion: turn input files (text, JSONL, Parquet, flat token arrays) into a corpus.

Inputs are found and cut into work units (:mod:`.inputs`), read by their registered
format (:mod:`.formats`, through :mod:`.input_readers`), converted by workers (:mod:`.workers`) and
published as one corpus (:mod:`mixle.corpus.storage.publish`); :mod:`.pipeline` drives it. The public
names are re-exported by :mod:`mixle.corpus`.

Named ``ingestion`` (not ``ingest``) because ``mixle.corpus.ingest`` is the public
function.
"""
