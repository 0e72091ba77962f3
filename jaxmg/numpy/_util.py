"""Argument handling shared by ``jaxmg.numpy.linalg`` and ``jaxmg.scipy.linalg``: dtype
promotion, shape checks, the Hermitian input convention and leading batch dimensions."""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .. import _checks, _context, _dispatch, _plan, _routes, _sharded
from .._context import is_tracer
from .._dense import _explicit_mesh, adjoint, spec_for, spec_of
from .._layout import divides, entry_axes


def inexact(*arrays, matrices: int = 1):
    """The arguments as arrays of one inexact dtype, promoted as JAX's ``promote_dtypes_inexact``
    promotes them (``jaxmg._checks.inexact_dtype``: 64-bit integers become float64, other integers
    and booleans float32), each as the caller holds it (:func:`held`; the first ``matrices`` are
    matrices, the others right-hand sides). A list or tuple is refused with the TypeError that
    JAX's functions raise for one (they take arrays and scalars only)."""
    for k, x in enumerate(arrays):
        if isinstance(x, (list, tuple)):
            raise TypeError(
                f"jaxmg.numpy.linalg and jaxmg.scipy.linalg functions, as JAX's, require ndarray or scalar "
                f"arguments, got {type(x)} at position {k}; pass jnp.asarray(...) of it."
            )
    arrays = [jnp.asarray(_checks.as_array(x, "a" if k < matrices else "b")) for k, x in enumerate(arrays)]
    dtype = _checks.inexact_dtype(*arrays)
    return tuple(held(x if x.dtype == dtype else x.astype(dtype), k < matrices) for k, x in enumerate(arrays))


def held(x, matrix: bool = True):
    """``x`` placed in the layout in which the caller holds it (``jaxmg._plan.held_layout``; a
    right-hand side, not a ``matrix``, only where its own is known): the JAX operations that a
    function runs on it before jaxmg's calls (``(a + a^H) / 2``, a transpose) then leave its
    cotangent in that layout, as jaxmg's calls leave theirs (docs/derivatives.md)."""
    layout = _plan.held_layout(x, default=matrix)
    if layout is None:
        return x
    _plan.check_mesh_context(x, layout.mesh)
    return _sharded.place(x, layout.spec, layout.mesh)


def square(a, name: str, error: type[Exception] = ValueError) -> None:
    """``a`` must be (..., N, N); else ``error`` (the class that JAX's own function raises)."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise error(f"{name}: a must be a square matrix or a batch of them (..., N, N), got shape {tuple(a.shape)}.")


def matrices(a, name: str, error: type[Exception] = TypeError) -> None:
    """``a`` must be a matrix or a stack of them (..., M, N); else ``error``, the class that JAX's
    own function raises (its decompositions a TypeError: "Input 0 to svd must have rank at least
    2")."""
    if a.ndim < 2:
        raise error(
            f"{name}: a must be a matrix or a stack of them (..., M, N) (rank at least 2), got shape {a.shape}."
        )


def in_layout(x, spec: P, like):
    """``x`` laid out as ``spec`` on like's mesh where it has Explicit axes (elsewhere unchanged;
    a concrete ``x`` is put there, as an eager reshard outside ``jax.set_mesh`` cannot)."""
    mesh = _explicit_mesh(like)
    if mesh is None:
        return x
    if not is_tracer(x) and not is_tracer(like):
        return jax.device_put(x, NamedSharding(like.sharding.mesh, spec))
    return jax.sharding.reshard(x, NamedSharding(mesh, spec))


def in_layout_of(x, like, matrix: bool = True):
    """``x`` laid out like ``like``: on Explicit mesh axes; eagerly for a concrete ``like`` on Auto
    axes (where an eager op between differently laid-out arrays returns a replicated one); and for
    a traced ``like`` on Auto axes in the layout in which the caller holds it (:func:`held`: where
    it is not known, that of a ``matrix``) where it divides x. Elsewhere unchanged; on Explicit
    axes an ``x`` whose shape like's layout does not divide is replicated
    (``jaxmg._dense.spec_for``)."""
    mesh = _explicit_mesh(like)
    if mesh is not None:
        return jax.sharding.reshard(x, NamedSharding(mesh, spec_for(like, x.shape)))
    sharding = getattr(like, "sharding", None)
    if not is_tracer(like) and not is_tracer(x) and isinstance(sharding, NamedSharding) and x.ndim == like.ndim:
        # x of like's shape, or of another that like's layout divides (a least-squares solution)
        if x.shape == like.shape or divides(x.shape, sharding.spec, sharding.mesh):
            return jax.device_put(x, sharding)
    layout = _plan.held_layout(like, default=matrix)
    if layout is None or x.ndim != like.ndim or not divides(x.shape, layout.spec, layout.mesh):
        return x
    return _sharded.place(x, layout.spec, layout.mesh)


def solution_in_layout(x, b, a):
    """A solution ``x`` ((N,) or (N, K)) of ``a @ x = b`` in b's layout where that is known and
    divides x (:func:`in_layout_of`); else, where only a's is (Auto axes inside ``jax.jit``: a's
    layout there is rule 4's default), with its rows split as a's rows are, as jaxmg's own solves
    place theirs."""
    placed = in_layout_of(x, b, matrix=False)
    layout = None if placed is not x else _plan.held_layout(a)
    if layout is None:
        return placed
    spec = P(*tuple(layout.spec)[:1], *(None,) * (x.ndim - 1))
    return _sharded.place(x, spec, layout.mesh) if divides(x.shape, spec, layout.mesh) else x


def herm_input(a, symmetrize: bool, lower: bool):
    """The matrix whose lower triangle jaxmg reads for Hermitian ``a``: ``(a + a^H)/2`` when
    ``symmetrize`` (as JAX), else ``a`` (``lower``) or ``a^H`` (its upper triangle, conjugated
    into the lower one)."""
    if symmetrize:
        return in_layout_of((a + in_layout_of(adjoint(a), a)) / 2, a)
    return a if lower else in_layout_of(adjoint(a), a)


def compiled_once(fn, **jit_options):
    """``fn`` as one ``jax.jit`` (eagerly and inside ``jax.jit`` the same computation, the same
    numbers), except on a member of a stack under ``jax.vmap`` (its first argument): there ``fn``
    runs as it is, since a ``jax.jit`` would hide the stack from jaxmg's calls inside it, which
    would then lay each matrix out over the mesh (and its derivatives with it) instead of keeping
    whole matrices where the stack lies (docs/routes.md)."""
    compiled = jax.jit(fn, **jit_options)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if args and _context.stack_of(args[0]) is not None:
            return fn(*args, **kwargs)
        return compiled(*args, **kwargs)

    return call


def map_batch(fn, args, core_ranks, *, solution: bool = False):
    """``fn`` of 2-D matrices (and their right-hand sides) over leading batch dimensions.

    Each argument has ``core_ranks[i]`` trailing dimensions that ``fn`` takes; the dimensions
    before them are broadcast together and mapped with nested ``jax.vmap`` (the stack's route
    is jaxmg's: each device solves its own matrices where they fit, docs/routes.md); an
    argument without batch dimensions is shared by every matrix. Eagerly, matrix outputs are
    returned in a's layout, and a ``solution`` in the layout of its right-hand side (the last
    argument).
    """
    shapes = [x.shape[: x.ndim - r] for x, r in zip(args, core_ranks)]
    batch = tuple(jnp.broadcast_shapes(*shapes)) if any(shapes) else ()
    like = args[-1] if solution else args[0]
    if batch:
        args = [
            x if x.shape[: x.ndim - r] in (batch, ()) else jnp.broadcast_to(x, batch + x.shape[x.ndim - r :])
            for x, r in zip(args, core_ranks)
        ]
        args = _batch_split_alike(args, core_ranks, len(batch))
        for depth in range(len(batch)):
            in_axes = tuple(0 if x.ndim - r > depth else None for x, r in zip(args, core_ranks))
            fn = jax.vmap(fn, in_axes=in_axes)
    if _context.staging():  # a program is traced: its arrays of no mesh join the others' mesh
        args = _sharded.meshless_typed_alike(args)
    with own_mesh(args):
        return _in_layout_kept(fn(*args), like)


def _batch_split_alike(args, core_ranks, depth: int) -> list:
    """The arguments with batch dimensions (``depth`` of them, before each one's ``core_ranks``
    trailing ones) split alike over Explicit mesh axes, as the first such argument on them is, each one's
    other dimensions as before less the axes that the batch split uses (``jax.vmap`` refuses a
    batch dimension split differently across its inputs); elsewhere unchanged."""
    leader = next((x for x, r in zip(args, core_ranks) if x.ndim > r and _explicit_mesh(x) is not None), None)
    if leader is None:
        return args
    lead = tuple(spec_of(leader))[:depth]
    return [
        x if x.ndim == r or tuple(spec_of(x))[:depth] == lead else stack_split(x, lead=lead, like=leader)
        for x, r in zip(args, core_ranks)
    ]


def stack_split(x, *, lead: tuple, like=None):
    """``x`` (an array of a stack) with its leading dimensions split as ``lead`` where ``like``
    (default x) lies on Explicit mesh axes, its other dimensions as before, less the axes that
    ``lead`` uses."""
    used = {name for e in lead for name in entry_axes(e)}
    rest = tuple(None if used & set(entry_axes(e)) else e for e in tuple(spec_of(x))[len(lead) :])
    return in_layout(x, P(*lead, *rest), x if like is None else like)


def own_mesh(args):
    """Eagerly, the mesh of Explicit axes that the arguments lie on, as the context of the call
    (JAX refuses an eager ``jax.vmap`` that makes arrays on Explicit axes outside ``jax.set_mesh``);
    else no context."""
    if _context.tracing() or any(is_tracer(x) for x in args):
        return contextlib.nullcontext()
    for x in args:
        sharding = getattr(x, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if isinstance(mesh, Mesh) and _explicit_mesh(x) is not None:
            return jax.set_mesh(mesh)
    return contextlib.nullcontext()


def map_solve(fn, args, *, fold_columns: bool = False):
    """:func:`map_batch` of a solve ``fn(a, ..., b)``: ``a`` (..., N, N) first, ``b`` last, (N,)
    (one vector for every matrix) or (..., N, K), and any argument between them a vector (..., N);
    ``x`` is laid out like ``b``. Batch dimensions of different ranks are JAX's rank promotion
    (:func:`check_rank_promotion`).

    ``fold_columns`` (for ``fn`` linear in ``b`` column by column: a solve with a matrix or its
    factor): where only ``b`` has batch dimensions and lies on Explicit mesh axes, every column of
    the stack is solved in one call of ``fn`` with the one matrix (:func:`columns_of`), its split
    kept, as JAX's batching of a solve with an unbatched matrix does (whose reshape JAX cannot lay
    out there where the stack is split)."""
    b = args[-1]
    core_ranks = (2, *(1,) * (len(args) - 2), 1 if b.ndim == 1 else 2)
    check_rank_promotion(args, core_ranks)
    shared = all(x.ndim == r for x, r in zip(args[:-1], core_ranks))
    if fold_columns and b.ndim > 2 and shared and _explicit_mesh(b) is not None:
        with own_mesh(args):
            columns, back = columns_of(b)
            return back(fn(*args[:-1], columns))
    return map_batch(fn, args, core_ranks, solution=True)


def columns_of(b):
    """``b`` (..., N, K) as one matrix (N, M) of all its columns, and the function that takes a
    matrix of that shape (a solution) back to b's shape and layout, ``b`` on Explicit mesh axes
    (:func:`map_solve` folds only there). The dimensions that b's layout splits come first among
    the columns, so that the columns stay split over the same axes (the merge and its inverse move
    no data); the rows keep their own split."""
    n, rest = b.shape[-2], [*range(b.ndim - 2), b.ndim - 1]
    mesh, spec = _explicit_mesh(b), tuple(spec_of(b))
    assert mesh is not None, "columns_of folds a b on Explicit mesh axes"
    rest = [d for d in rest if spec[d] is not None] + [d for d in rest if spec[d] is None]
    order = [b.ndim - 2, *rest]
    moved = jnp.transpose(b, order)
    axes = tuple(a for d in rest for a in entry_axes(spec[d]))
    merged = NamedSharding(mesh, P(spec[-2], axes or None))
    parts = NamedSharding(mesh, P(*(spec[d] for d in order)))

    def back(x):
        x = jax.lax.reshape(jax.sharding.reshard(x, merged), moved.shape, out_sharding=parts)
        return jnp.transpose(x, _inverse(order))

    return jax.lax.reshape(moved, (n, moved.size // max(n, 1)), out_sharding=merged), back


def _inverse(order):
    """The permutation that undoes ``jnp.transpose(x, order)``."""
    return [order.index(d) for d in range(len(order))]


def check_rank_promotion(args, core_ranks) -> None:
    """Arguments whose batch dimensions (those before each one's ``core_ranks`` trailing ones)
    differ in rank are broadcast by rank promotion, which JAX's own linear algebra (``jnp.vectorize``)
    refuses under ``jax.numpy_rank_promotion("raise")`` and warns of under ``"warn"``: so here."""
    mode = jax.config.jax_numpy_rank_promotion
    if mode == "allow" or len({x.ndim - r for x, r in zip(args, core_ranks)}) < 2:
        return
    shapes = " ".join(str(tuple(x.shape)) for x in args)
    if mode == "raise":
        raise ValueError(
            f"Operands could not be broadcast together on shapes {shapes} (their batch dimensions differ in rank) "
            "with the config option jax_numpy_rank_promotion='raise', as in JAX; add the leading dimensions "
            "(b[None]) or set jax_numpy_rank_promotion='allow'."
        )
    _dispatch.warn(
        f"Following NumPy automatic rank promotion on shapes {shapes}. Set the jax_numpy_rank_promotion "
        "config option to 'allow' to disable this warning.",
        UserWarning,
    )


def _in_layout_kept(out, like):
    """The outputs of like's rank in like's layout (``like``: the matrix ``a``, or the right-hand
    side of a solution) where that layout is known: eagerly, and on Explicit mesh axes inside
    ``jax.jit`` (a stack split inside its matrices, whose batch route returns its outputs split
    over the batch axis alone). jaxmg's eager calls under ``jax.vmap`` return them replicated, and
    products on Auto mesh axes (pinv, a wide R, a solution's permuted or triangular solves) where
    XLA put them. A no-op for outputs already there, and for shapes the mesh does not divide."""
    traced = is_tracer(like)
    mesh = _explicit_mesh(like) if traced else None
    sharding = NamedSharding(mesh, spec_of(like)) if mesh is not None else getattr(like, "sharding", None)
    if (traced and mesh is None) or not isinstance(sharding, NamedSharding):
        return out

    def place(x):
        if getattr(x, "ndim", None) != like.ndim or not divides(x.shape, tuple(sharding.spec), sharding.mesh):
            return x
        if traced:
            return jax.sharding.reshard(x, sharding)
        return x if is_tracer(x) else jax.device_put(x, sharding)

    return jax.tree.map(place, out)


def take_columns(v, order):
    """Columns ``order`` (an index array) of matrix ``v``, in v's layout."""
    mesh = _sharded_explicitly(v, order)
    if mesh is None:
        return v[:, order]
    return v.at[:, order].get(out_sharding=NamedSharding(mesh, spec_of(v)))


def take_rows(x, order):
    """Rows ``order`` (an index array) of ``x`` (n,) or (n, k), in x's layout."""
    mesh = _sharded_explicitly(x, order)
    if mesh is None:
        return x[order]
    return x.at[order].get(out_sharding=NamedSharding(mesh, spec_of(x)))


def _sharded_explicitly(x, order):
    """x's mesh where x or the index array ``order`` is split over Explicit mesh axes (the gather
    then needs an ``out_sharding`` to stay in x's layout), else None: a gather from arrays that are
    not split is not split either, and one with an ``out_sharding`` cannot be differentiated
    inside a partially manual ``jax.shard_map`` (whose other axes are Explicit). Under
    ``jax.vmap`` a member of a stack counts as split (its stack may be: JAX cannot resolve the
    gather of a whole array by split indices, or the reverse, without the ``out_sharding``)."""
    mesh = _explicit_mesh(x)
    split = any(e is not None for y in (x, order) if _explicit_mesh(y) is not None for e in spec_of(y))
    stacked = not _context.manual() and any(_context.stack_of(y) is not None for y in (x, order))
    return mesh if mesh is not None and (split or stacked) else None


def distributed_mesh(a, op: str):
    """The mesh on which jaxmg's ``op`` ("LU", "qr", ...) of one matrix ``a`` takes the
    distributed route (docs/routes.md); None where it does not: on one device, for a stack under
    ``jax.vmap``, inside ``jax.shard_map``, inside ``jax.jit`` where a's layout is not known, and
    where the device's own solver takes it (the local route)."""
    if a.ndim != 2 or _context.manual() or _context.stack_of(a) is not None:
        return None
    mesh = _context.find_mesh(None, a, ())
    if mesh is None or a.dtype not in _checks.SUPPORTED_DTYPES:  # refused by the operation itself, with its name
        return None
    if _routes.route(op, a.shape, a.dtype, mesh) != _routes.DISTRIBUTED:
        return None
    return mesh
