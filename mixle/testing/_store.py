"""StoreContract: what every :class:`~mixle.corpus.ShardStore` must do, checked."""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable

from mixle.corpus.format.spec import MANIFEST_NAME
from mixle.corpus.format.store import ShardStore
from mixle.errors import (
    CorpusError,
    CorpusFormatError,
    CorpusNotFoundError,
    UnsupportedStoreOperation,
)
from mixle.testing._raises import raises

__all__ = ["StoreContract"]

_BODY = bytes(range(256)) * 5  # 1280 bytes, every byte value


class StoreContract:
    """The checks a store passes to back ``open_corpus`` and ``publish_corpus``.

    Parameters
    ----------
    make_store
        Returns a store over a fresh, empty location (called once per check).

    :meth:`check_all` runs every check; each ``check_*`` method may also run alone
    (e.g. one pytest test each). A check that does not apply to a store (writes on a
    read-only one) checks instead that the method refuses with
    :class:`~mixle.errors.UnsupportedStoreOperation`.
    """

    def __init__(self, make_store: Callable[[], ShardStore]) -> None:
        self.make_store = make_store

    def check_all(self) -> None:
        """Run every check."""
        for name in sorted(dir(self)):
            if name.startswith("check_") and name != "check_all":
                getattr(self, name)()

    def _writable(self) -> ShardStore | None:
        store = self.make_store()
        assert isinstance(store, ShardStore), f"{store!r} is not a ShardStore"
        if store.supports_writes:
            return store
        with raises(UnsupportedStoreOperation):
            store.write_bytes("x", b"x")
        with raises(UnsupportedStoreOperation):
            store.remove("x")
        return None

    def check_capability_flags_are_bools(self) -> None:
        store = self.make_store()
        for flag in (
            "supports_ranges",
            "supports_writes",
            "supports_listing",
            "supports_server_side_copy",
        ):
            assert isinstance(getattr(store, flag), bool), f"{flag} must be a bool"

    def check_missing_files_raise_the_declared_errors(self) -> None:
        store = self.make_store()
        with raises(CorpusNotFoundError):
            store.read_manifest()
        with raises(CorpusFormatError):
            store.file_size("absent.tokens")
        assert not store.exists("absent.tokens")
        if store.supports_ranges:
            with raises((FileNotFoundError, CorpusFormatError)):
                store.read_range("absent.tokens", 0, 4)
        if store.supports_listing:
            assert store.list_sizes("absent") == {}
        if store.supports_writes:
            store.remove("absent.tokens")  # removing nothing is not an error

    def check_writes_are_visible_whole(self) -> None:
        store = self._writable()
        if store is None:
            return
        store.write_bytes("a.bin", _BODY)
        assert store.exists("a.bin")
        assert store.file_size("a.bin") == len(_BODY)
        assert store.read_prefix("a.bin", len(_BODY) + 10) == _BODY
        store.write_bytes("a.bin", b"new")  # a rewrite replaces the whole file
        assert store.read_prefix("a.bin", 100) == b"new"
        with tempfile.TemporaryDirectory() as directory:
            local = os.path.join(directory, "local.bin")
            with open(local, "wb") as handle:
                handle.write(_BODY[::-1])
            store.put_file(local, "b.bin")
            assert store.read_prefix("b.bin", len(_BODY)) == _BODY[::-1]
            with raises(FileNotFoundError):
                store.put_file(os.path.join(directory, "missing"), "c.bin")
        assert not store.exists("c.bin"), "a failed put left a file visible"
        store.write_bytes(MANIFEST_NAME, b"{}")
        assert store.read_manifest() == b"{}"
        store.remove("a.bin")
        assert not store.exists("a.bin")

    def check_ranges(self) -> None:
        store = self._writable()
        if store is None:
            return
        if not store.supports_ranges:
            with raises(UnsupportedStoreOperation):
                store.read_range("r.bin", 0, 1)
            return
        store.write_bytes("r.bin", _BODY)
        assert store.read_range("r.bin", 10, 300) == _BODY[10:300]
        assert store.read_range("r.bin", 5, 5) == b""
        assert store.read_range("r.bin", 1200, 2000, exact=False) == _BODY[1200:]
        with raises(CorpusError):  # exact: a short body is an error (format or remote)
            store.read_range("r.bin", 1200, 2000)
        got = store.read_ranges(["r.bin", "r.bin"], [0, 1000], [3, 1280])
        assert got == [_BODY[:3], _BODY[1000:1280]]
        store.write_bytes("sub/s.bin", b"small")
        found = store.read_files(["r.bin", "sub/s.bin", "absent.bin"])
        assert found == {"r.bin": _BODY, "sub/s.bin": b"small"}, "read_files: missing left out"

    def check_listing(self) -> None:
        store = self._writable()
        if store is None:
            return
        if not store.supports_listing:
            with raises(UnsupportedStoreOperation):
                store.list_sizes()
            return
        store.write_bytes("top.bin", b"12345")
        store.write_bytes("sub/one.bin", b"1")
        store.write_bytes("sub/deeper/two.bin", b"22")
        assert store.list_sizes("sub") == {"one.bin": 1, "deeper/two.bin": 2}
        listing = store.list_sizes()
        assert {k: v for k, v in listing.items() if k in ("top.bin", "sub/one.bin")} == {
            "top.bin": 5,
            "sub/one.bin": 1,
        }
        store.remove("sub")
        assert store.list_sizes("sub") == {}

    def check_copy(self) -> None:
        store = self._writable()
        if store is None:
            return
        if not store.supports_server_side_copy:
            with raises(UnsupportedStoreOperation):
                store.copy("x", "y")
            return
        store.write_bytes("c.bin", _BODY)
        store.copy("c.bin", "c2.bin")
        assert store.read_prefix("c2.bin", len(_BODY)) == _BODY
        other = self.make_store()  # another store of the backend (a merge's input)
        other.write_bytes("o.bin", _BODY[:100])
        store.copy("o.bin", "c3.bin", origin=other)
        assert store.read_prefix("c3.bin", 100) == _BODY[:100]

    def check_pickles_as_its_location(self) -> None:
        store = self.make_store()
        restored = pickle.loads(pickle.dumps(store))
        assert type(restored) is type(store)
        assert restored.location == store.location
