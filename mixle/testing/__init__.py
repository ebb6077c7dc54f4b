"""Conformance suites a backend runs to show it behaves like mixle's own.

A third-party storage backend (:func:`mixle.corpus.register_backend`) or document
collection runs the same checks mixle's local, cached-S3, range and HTTP backends
pass. Failures are plain ``AssertionError``; importing this package does not import
pytest or any other test framework.

assert_documents_contract(documents, expected)
    The whole read surface of a document collection: indexing, slicing, iteration,
    ``take``, ``gather_into``, lengths, fingerprint, prefetch and pickling.
VirtualDocuments(num_documents)
    A collection of up to 10^11+ documents whose lengths and tokens are hashes of the
    index (nothing stored), with closed-form ``token_offsets``: drives plans at scale.
StoreContract(make_store)
    A :class:`~mixle.corpus.ShardStore`: its capability flags honoured, byte ranges,
    listing, writes visible whole, missing files raising the declared errors.
"""

from __future__ import annotations

from mixle.testing._documents import assert_documents_contract, assert_gather_contract, shard_starts
from mixle.testing._store import StoreContract
from mixle.testing._virtual import VirtualDocuments

__all__ = [
    "StoreContract",
    "VirtualDocuments",
    "assert_documents_contract",
    "assert_gather_contract",
    "shard_starts",
]
