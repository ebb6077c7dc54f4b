"""The corpus format core: the byte layout, the manifest, writers, the reader, verify.

Everything a local corpus needs and nothing about where else it may live: storage
backends (:mod:`mixle.corpus.storage`) and ingestion (:mod:`mixle.corpus.ingest`) build
on these modules, never the other way round. The public names are re-exported by
:mod:`mixle.corpus`.
"""
