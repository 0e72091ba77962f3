"""Foreign calls that act on each matrix of a stack on its own, split where the stack lies.

``jax.ffi.ffi_call`` gives XLA's partitioner no rule for its custom call, so a stack of matrices
split over the devices on its batch axis is gathered whole onto every device before the call
(each device then factors every matrix). :func:`call` makes the same call with the rule that
JAX's own ``jax.lax.linalg`` lowerings carry: its leading (batch) dimensions may be split over
the mesh, each device calling the handler on the matrices it holds, and its matrix dimensions are
whole. Inside ``jax.jit`` a stack whose layout is not known while tracing (Auto mesh axes,
``in_shardings`` without ``jax.set_mesh``) is then factored where XLA places it, as with
``jax.numpy.linalg``.

Built on JAX's extension interfaces only (``jax.extend``, ``jax.interpreters.mlir``,
``jax.ffi.ffi_lowering``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.extend import core as _core
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import sdy
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec as P

_call_p = _core.Primitive("jaxmg_per_matrix_call")
_call_p.multiple_results = True


def call(
    target: str,
    results: Sequence[jax.ShapeDtypeStruct],
    *,
    column_major: bool = False,
    input_output_aliases: dict | None = None,
    **attributes,
) -> Callable:
    """The foreign function ``target`` as ``jax.ffi.ffi_call(target, results, ...)`` makes it,
    for a handler that takes one stack of matrices ``(..., m, n)`` and returns ``results``, each
    with the operand's leading (batch) dimensions: under ``jax.vmap`` the batch grows by the
    mapped axis, and XLA may split the batch dimensions over the devices (never the others).
    ``column_major``: the operand and the first result are column-major (LAPACK's layout)."""
    shapes = tuple((tuple(r.shape), np.dtype(r.dtype)) for r in results)
    aliases = tuple(sorted((input_output_aliases or {}).items()))

    def bound(x):
        return tuple(
            _call_p.bind(
                x,
                target=target,
                results=shapes,
                batch=x.ndim - 2,
                column_major=column_major,
                aliases=aliases,
                attributes=tuple(sorted(attributes.items())),
            )
        )

    return bound


def _impl(x, **params):
    """An eager call: compiled, also under ``jax.disable_jit`` (a handler has no other way to run)."""
    with jax.disable_jit(False):
        return jax.jit(lambda x: _call_p.bind(x, **params))(x)


def _abstract(x, *, results, batch, **_):
    """The results' types: split over the mesh as the operand's batch dimensions are, whole in
    the others, varying over the operand's manual axes."""
    spec = tuple(x.sharding.spec) + (None,) * (x.ndim - len(tuple(x.sharding.spec)))

    def result(shape, dtype):
        placed = NamedSharding(x.sharding.mesh, P(*spec[:batch], *(None,) * (len(shape) - batch)))
        return x.update(shape=shape, dtype=dtype, weak_type=False, sharding=placed)

    return [result(shape, dtype) for shape, dtype in results]


def _batched(args, dims, *, results, batch, **params):
    """``jax.vmap``: the mapped axis becomes the first batch dimension of the operand and results."""
    (x,), (d,) = args, dims
    x = jax.numpy.moveaxis(x, d, 0)
    grown = tuple(((x.shape[0],) + shape, dtype) for shape, dtype in results)
    out = _call_p.bind(x, results=grown, batch=batch + 1, **params)
    return out, [0] * len(out)


def _column_major(rank: int) -> tuple:
    """Minor-to-major layout of a column-major stack of matrices of rank ``rank``."""
    return (rank - 2, rank - 1) + tuple(range(rank - 3, -1, -1))


def _sharding_rule(batch: int, avals_in, avals_out):
    """Shardy's rule: the batch dimensions are shared factors; every other dimension is a factor
    of its own that must stay whole."""
    sizes = [int(d) for d in avals_in[0].shape[:batch]]
    replicated = []

    def mapping(aval):
        dims = [sdy.DimMappingAttr.get(factor_indices=[k]) for k in range(batch)]
        for extent in aval.shape[batch:]:
            replicated.append(len(sizes))
            dims.append(sdy.DimMappingAttr.get(factor_indices=[len(sizes)]))
            sizes.append(int(extent))
        return sdy.TensorMappingAttr.get(dim_mappings=dims)

    operands = [mapping(a) for a in avals_in]
    outputs = [mapping(a) for a in avals_out]
    return sdy.OpShardingRuleAttr.get(
        factor_sizes=sizes,
        operand_mappings=operands,
        result_mappings=outputs,
        need_replication_factors=replicated,
        is_custom=True,
    )


def _lowering(ctx, x, *, target, results, batch, column_major, aliases, attributes):
    del results
    extra = {"mhlo.frontend_attributes": ir.DictAttr.get({"num_batch_dims": ir.StringAttr.get(str(batch))})}
    if jax.config.jax_use_shardy_partitioner:
        extra["sdy.sharding_rule"] = _sharding_rule(batch, ctx.avals_in, ctx.avals_out)
    first = _column_major(len(ctx.avals_in[0].shape)) if column_major else None
    rule = jax.ffi.ffi_lowering(
        target,
        operand_layouts=[first],
        result_layouts=[first] + [None] * (len(ctx.avals_out) - 1),
        operand_output_aliases=dict(aliases),
        extra_attributes=extra,
    )
    return rule(ctx, x, **dict(attributes))


_call_p.def_impl(_impl)
_call_p.def_abstract_eval(_abstract)
batching.primitive_batchers[_call_p] = _batched
mlir.register_lowering(_call_p, _lowering)
