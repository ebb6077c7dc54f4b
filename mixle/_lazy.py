"""Lazy attributes for package facades (PEP 562): a name is imported on first use.

A facade lists each public name's defining module in a ``_HOMES`` table, imports the
names under ``TYPE_CHECKING`` for type checkers, and delegates its module-level
``__getattr__`` and ``__dir__`` here, so importing the facade loads none of the
modules behind it (``mixle.train``: no torch; ``mixle.corpus``: no ingest, export or
remote code). ``tests/architecture/test_layering.py`` reads the ``_HOMES`` tables as
import edges, so the layering and cycle rules still see them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, MutableMapping


def load_attribute(
    namespace: MutableMapping[str, object], homes: Mapping[str, str], name: str
) -> object:
    """Import the module ``homes[name]``, cache its ``name`` in ``namespace``, return it.

    ``namespace`` is the facade's ``globals()``; a name not in ``homes`` raises
    :class:`AttributeError` naming the facade (``namespace["__name__"]``) and the name.
    """
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    namespace[name] = value
    return value


def attribute_names(namespace: Mapping[str, object], public: Iterable[str]) -> list[str]:
    """The facade's ``dir()``: its loaded globals and its public names, sorted."""
    return sorted(set(namespace) | set(public))
