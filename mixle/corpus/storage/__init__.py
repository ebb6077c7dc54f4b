"""Where a corpus lives: fsspec remotes, the shard cache, range reads, zarr, publishing.

Builds on :mod:`mixle.corpus.format` (it reads and writes that format through other
media). The public names are re-exported by :mod:`mixle.corpus`.
"""
