"""``to_dict``/``from_dict`` for mixle objects: JSON-able dicts, never pickles.

Every serialisable class registers a type name with :func:`register`; its ``to_dict``
returns a dict carrying ``"type": <name>`` and :func:`from_dict` dispatches on that name
to the class's ``from_dict``. Dicts hold only JSON types: tensors travel as
:func:`tensors_to_blob` strings — base64 text of the bytes ``torch.save`` writes for a
*state dict* (a flat mapping of names to tensors, or an optimizer state dict), read back
with ``torch.load(weights_only=True)``, which refuses to unpickle arbitrary objects. A
module is never pickled: its dict names the architecture and its constructor arguments,
and the weights travel as a state-dict blob.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from mixle.errors import CheckpointError

__all__ = [
    "from_dict",
    "register",
    "registered_types",
    "require_version",
    "tensors_from_blob",
    "tensors_to_blob",
    "to_dict",
]

_T = TypeVar("_T")
_REGISTRY: dict[str, Any] = {}


def register(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: make ``cls.from_dict`` reachable from :func:`from_dict` as ``name``.

    Raises
    ------
    CheckpointError
        ``name`` is already registered to a different class.
    """

    def decorate(cls: type[_T]) -> type[_T]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise CheckpointError(
                f"type name {name!r} is already registered to {existing.__qualname__}."
            )
        _REGISTRY[name] = cls
        return cls

    return decorate


def require_version(d: Mapping[str, Any], what: str, version: int = 1) -> None:
    """Check the ``"version"`` of a serialised dict before reading anything else of it.

    Raises
    ------
    CheckpointError
        ``d["version"]`` is missing or not ``version``; the message names ``what`` (e.g.
        ``"MixtureDistribution dict"``) and both versions.
    """
    if d.get("version") != version:
        raise CheckpointError(
            f"{what} version must be {version}. Got {d.get('version')!r} instead."
        )


def registered_types() -> dict[str, Any]:
    """Return a copy of the registry: type name -> class."""
    return dict(_REGISTRY)


def to_dict(obj: Any) -> dict[str, Any]:
    """Return ``obj.to_dict()``, checking that it names a registered type."""
    result = obj.to_dict()
    if not isinstance(result, dict) or result.get("type") not in _REGISTRY:
        raise CheckpointError(
            f"{type(obj).__qualname__}.to_dict() must return a dict with a registered 'type'."
        )
    return dict(result)


def from_dict(d: Mapping[str, Any], **kwargs: Any) -> Any:
    """Rebuild the object a ``to_dict`` call described.

    Keyword arguments go to the class's ``from_dict`` (e.g. ``device="cpu"`` to load a
    CUDA-trained leaf on a CPU machine).

    Raises
    ------
    CheckpointError
        ``d`` is not a dict, lacks ``"type"``, or names an unregistered type.
    """
    if not isinstance(d, Mapping):
        raise CheckpointError(f"from_dict() needs a dict. Got {type(d).__name__} instead.")
    name = d.get("type")
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise CheckpointError(f"unknown type {name!r} in dict (registered: {known}).")
    return cls.from_dict(d, **kwargs)


def tensors_to_blob(state: Mapping[str, Any]) -> str:
    """Serialise a state dict (tensors on any device) to base64 text of ``torch.save`` bytes.

    Tensors are copied to CPU first, so the blob loads on a machine without the device.
    """
    buffer = io.BytesIO()
    torch.save(_to_cpu(dict(state)), buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def tensors_from_blob(blob: Any, what: str = "tensor blob") -> dict[str, Any]:
    """Read a :func:`tensors_to_blob` string with ``torch.load(weights_only=True)``.

    Raises
    ------
    CheckpointError
        ``blob`` is not base64 text of a torch-saved dict, or holds anything the
        weights-only unpickler refuses (arbitrary classes, code).
    """
    if not isinstance(blob, str):
        raise CheckpointError(f"{what} must be a base64 string. Got {type(blob).__name__} instead.")
    try:
        raw = base64.b64decode(blob.encode("ascii"), validate=True)
        loaded = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as exc:  # any decoding/unpickling failure means a corrupt blob
        raise CheckpointError(f"{what} cannot be read as a weights-only state dict: {exc}") from exc
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{what} must hold a dict. Got {type(loaded).__name__} instead.")
    return loaded


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_cpu(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_to_cpu(item) for item in value)
    return value
