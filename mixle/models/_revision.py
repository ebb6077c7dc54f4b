"""Model revisions: a SHA-256 digest of a module's parameters, computed once per revision.

A gradient is only meaningful at the weights it was computed at, so gradient states pin
the *revision* of the module: the SHA-256 of every parameter's name, dtype, shape and
bytes (in ``named_parameters`` order; a tied/shared tensor counts once).

Hashing a model on every micro-batch would cost real time (and a device-to-host copy
on CUDA), so the digest is cached per module against a cheap *revision token*: the
identity, storage pointer and autograd version counter of every parameter. Every
in-place update through autograd-visible tensors — optimizer steps, ``load_state_dict``,
``with torch.no_grad(): p.add_(...)`` — bumps a version counter and so invalidates the
cache. Writing through ``p.data`` bypasses version counters; code that does so must
not hold accumulators across that write (mixle itself never writes through ``.data``).
"""

from __future__ import annotations

import hashlib
import weakref

import torch
from torch import nn

__all__ = ["RevisionToken", "revision_digest", "revision_token"]

RevisionToken = tuple[tuple[int, int, int], ...]

_CACHE: weakref.WeakKeyDictionary[nn.Module, tuple[RevisionToken, str]] = (
    weakref.WeakKeyDictionary()
)


def revision_token(module: nn.Module) -> RevisionToken:
    """Return the cheap token that changes whenever a parameter is replaced or written."""
    return tuple((id(p), p.data_ptr(), p._version) for p in module.parameters())


def revision_digest(module: nn.Module) -> str:
    """Return the hex SHA-256 digest of ``module``'s parameters (cached per revision)."""
    token = revision_token(module)
    cached = _CACHE.get(module)
    if cached is not None and cached[0] == token:
        return cached[1]
    digest = hashlib.sha256()
    for name, param in module.named_parameters():
        data = param.detach().reshape(-1).contiguous().cpu()
        digest.update(f"{name}|{data.dtype}|{tuple(param.shape)}|".encode())
        digest.update(data.view(torch.uint8).numpy().data)
    result = digest.hexdigest()
    _CACHE[module] = (token, result)
    return result
