"""A loader's state inside a ``torch.distributed.checkpoint`` (DCP) checkpoint.

DCP saves a state dict by flattening nested dicts into keys and de-duplicating equal
keys across ranks: one rank writes each non-tensor key. A per-rank loader state put
straight into it loses every rank's state but one (the failure Megatron-Bridge #5637
hit). :class:`DcpLoaderState` is the ``Stateful`` that goes into the checkpoint instead
(torchtitan's shape)::

    {"layout": "global" | "per-rank",
     "dp_world_size": W,
     "global": "<json>"            # global layout: one state, identical on every rank
     "dp_rank_<r>": "<json>"}      # per-rank layout: one key per data-parallel rank

The loader's own ``state_dict()`` is stored as one JSON string, a single DCP leaf, so
it comes back exactly (no list/tuple/``None`` rewriting by DCP's flattening). A
global-layout state resumes on any data-parallel size; a per-rank one only on the size
that saved it (:class:`~mixle.errors.StateMismatchError` naming ``dp_world_size``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mixle._checks import nonnegative_int, positive_int
from mixle.data._mesh import DpDims, dim_names, place_from_mesh
from mixle.data._ranks import current_rank_and_world_size
from mixle.errors import ArgumentError, ArgumentTypeError, StateMismatchError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["DcpLoaderState"]


@runtime_checkable
class _Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Any) -> None: ...


def _is_per_rank(loader: _Stateful) -> bool:
    """Whether the loader's state is tied to its rank: its stream identity names a rank
    and world size (the per-rank layout), or it has no stream identity at all."""
    identity = getattr(loader, "stream_identity", None)
    if not callable(identity):
        return True
    fields = identity()
    return "rank" in fields and "world_size" in fields


class DcpLoaderState:
    """The ``Stateful`` of ``torch.distributed.checkpoint`` that holds a loader's state.

    Parameters
    ----------
    loader
        Anything with JSON-able ``state_dict()`` / ``load_state_dict()``: a stream
        (``StreamingCorpus``, ``TokenStream``, ``Mixture``) or its torch dataset.
    dp_rank, dp_world_size
        This process's data-parallel place; both or neither (then ``mesh``'s, else
        :func:`~mixle.data._ranks.current_rank_and_world_size`).
    mesh, dp_dims
        A ``torch.distributed.DeviceMesh`` and the names of its data-parallel
        dimensions, in place of ``dp_rank``/``dp_world_size``
        (:func:`~mixle.data.data_parallel_place`). Tensor- and pipeline-parallel peers
        then share one key with one value, which DCP writes once.

    Put it in the state given to ``dcp.save``/``dcp.load`` (e.g.
    ``{"model": ..., "loader": DcpLoaderState(dataset)}``): ``dcp.load`` asks it for
    :meth:`state_dict` as the template to load into, then hands the loaded dict to
    :meth:`load_state_dict`, which restores the loader (nothing moves unless it fits).
    """

    def __init__(
        self,
        loader: Any,
        *,
        dp_rank: int | None = None,
        dp_world_size: int | None = None,
        mesh: DeviceMesh | None = None,
        dp_dims: DpDims = ("dp",),
    ) -> None:
        if not isinstance(loader, _Stateful):
            raise ArgumentTypeError(
                "`loader` must have state_dict() and load_state_dict(). "
                f"Got {type(loader).__name__} instead."
            )
        if (dp_rank is None) != (dp_world_size is None):
            raise ArgumentError(
                "`dp_rank` and `dp_world_size` must be given together. "
                f"Got dp_rank={dp_rank!r}, dp_world_size={dp_world_size!r}."
            )
        self.dp_dims = None if mesh is None else dim_names(dp_dims)
        dp_rank, dp_world_size = place_from_mesh(mesh, dp_dims, dp_rank, dp_world_size)
        if dp_rank is None or dp_world_size is None:
            dp_rank, dp_world_size = current_rank_and_world_size()
        self.dp_world_size = positive_int("dp_world_size", dp_world_size)
        self.dp_rank = nonnegative_int("dp_rank", dp_rank)
        if self.dp_rank >= self.dp_world_size:
            raise ArgumentError(
                f"`dp_rank` must be below dp_world_size {self.dp_world_size}. "
                f"Got {self.dp_rank} instead."
            )
        self.loader = loader
        self.layout = "per-rank" if _is_per_rank(loader) else "global"

    @property
    def key(self) -> str:
        """The checkpoint key of this rank's loader state."""
        return f"dp_rank_{self.dp_rank}" if self.layout == "per-rank" else "global"

    def state_dict(self) -> dict[str, Any]:
        """``{"layout", "dp_world_size", key: json}`` (see the module docstring)."""
        return {
            "layout": self.layout,
            "dp_world_size": self.dp_world_size,
            self.key: json.dumps(self.loader.state_dict(), sort_keys=True),
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore the loader from a dict :meth:`state_dict` saved.

        Raises
        ------
        StateMismatchError
            The dict lacks a field, was saved with another layout, or (per-rank layout)
            with another data-parallel size (both sizes named); or the loader refuses
            the state it holds.
        """
        if not isinstance(state, dict):
            raise StateMismatchError(
                f"DcpLoaderState state must be a dict. Got {type(state).__name__} instead."
            )
        # The layout first: a state of the other layout lacks this one's key, and its
        # layout is the useful thing to name.
        if "layout" in state and state["layout"] != self.layout:
            raise StateMismatchError(
                f"DcpLoaderState layout in checkpoint: {state['layout']!r} / "
                f"in loader: {self.layout!r}."
            )
        missing = [name for name in ("layout", "dp_world_size", self.key) if name not in state]
        if missing:
            raise StateMismatchError(
                f"DcpLoaderState state lacks the field(s) {', '.join(missing)}."
            )
        if self.layout == "per-rank" and state["dp_world_size"] != self.dp_world_size:
            where = "" if self.dp_dims is None else f" (mesh dims {self.dp_dims!r})"
            raise StateMismatchError(
                "DcpLoaderState per-rank loader state resumes only on the data-parallel "
                f"size that saved it: dp_world_size in checkpoint: {state['dp_world_size']!r} "
                f"/ in job: {self.dp_world_size!r}{where}. Use layout='global' to change it."
            )
        saved = state[self.key]
        if not isinstance(saved, str):
            raise StateMismatchError(
                f"DcpLoaderState field `{self.key}` must be a JSON string. "
                f"Got {type(saved).__name__} instead."
            )
        try:
            loaded = json.loads(saved)
        except json.JSONDecodeError as error:
            raise StateMismatchError(
                f"DcpLoaderState field `{self.key}` is not valid JSON: {error}."
            ) from None
        self.loader.load_state_dict(loaded)
