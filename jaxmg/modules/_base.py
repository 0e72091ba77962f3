"""What every factorisation module shares: construction checks and the kept operator."""

from __future__ import annotations

import functools
from typing import Optional

import equinox as eqx
import jax

from .. import _layout, _sharded
from .._call import Call, check_rhs, setup
from ..kernels import status as _status


class Factorisation(eqx.Module):
    """Base of the factorisation modules.

    ``operator`` is the factorised matrix in the caller's layout (a reference, not a copy),
    kept so that derivatives with respect to it can be taken; it is None when the call
    donated it. ``status`` is 0 on success (see each module). ``call`` is the static
    layout, backend, tile size, shape and dtype.
    """

    operator: Optional[jax.Array]
    status: jax.Array
    call: Call = eqx.field(static=True)

    @property
    def shape(self) -> tuple:
        """The factorised matrix's shape."""
        return self.call.shape

    @property
    def dtype(self):
        """The factorised matrix's dtype."""
        return self.call.dtype

    def _masked(self, *outputs):
        """``outputs``, NaN wherever :attr:`status` is not 0 (on every backend)."""
        return _status.masked(self.status, *outputs)

    @property
    def _call_here(self) -> Call:
        """:attr:`call`, on the concrete mesh of this module's arrays where the module was made
        inside ``jax.jit`` (its call then holds the abstract mesh) and is used eagerly."""
        return self.call.on_concrete_mesh(jax.tree.leaves(self))

    def _rhs(self, call: Call, b, name: str = "b", rows: Optional[int] = None):
        """Check right-hand side ``b`` against ``call`` (:attr:`_call_here`) and place it in its
        layout; returns (b, spec, home), ``home`` mapping the solution back to b's own layout
        (where b arrived with its columns split; else the identity)."""
        b, spec, own = check_rhs(call, b, name, rows)
        mesh = call.grid.mesh
        if own is None:
            return _put(b, spec, mesh), spec, lambda x: x
        # through b's own layout first, so that its cotangent comes back in it
        return _put(_put(b, own, mesh), spec, mesh), spec, functools.partial(_put, spec=own, mesh=mesh)


def _put(x, spec, mesh):
    """``x`` in layout ``spec`` on ``mesh``. Eagerly (also under eager ``jax.vmap``) a device
    transfer, or left to the compiled call for vmapped values; inside a trace a placement."""
    if isinstance(mesh, jax.sharding.Mesh) and _layout.is_eager((x,)):
        return _sharded.put_eager(x, jax.sharding.NamedSharding(mesh, spec))
    return _sharded.place(x, spec, mesh)


def compiled_under_vmap(method):
    """``method`` of a module, run inside ``jax.jit`` when it is called under an eager
    ``jax.vmap`` (the module's arrays or the arguments are its tracers): the solves'
    placements on Explicit mesh axes need a compiled program there, as the functions get
    from their own compiled calls. Keyword arguments, and arguments that are not arrays
    (``trans``), are static; the jitted function is cached on them, and ``jax.jit`` caches
    its compilations on the module's structure (its static call) and the arrays' types."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if not any(_layout.under_eager_vmap(x) for x in jax.tree.leaves((self, args))):
            return method(self, *args, **kwargs)
        static = tuple((i, x) for i, x in enumerate(args) if not hasattr(x, "shape"))
        arrays = (x for i, x in enumerate(args) if i not in dict(static))
        key = (method, len(args), static, tuple(sorted(kwargs.items())))
        try:
            jitted = _jitted_method(*key)
        except TypeError:  # an unhashable static argument (a list for b): not cached
            jitted = _jitted_method.__wrapped__(*key)
        return jitted(self, *arrays)
    return run


@functools.lru_cache(maxsize=256)
def _jitted_method(method, nargs: int, static: tuple, kwargs: tuple):
    """``jax.jit`` of ``method(module, *args, **kwargs)`` with the arguments at the positions of
    ``static`` fixed to their values; the others are the jitted function's array arguments."""
    fixed, options = dict(static), dict(kwargs)

    def traced(module, *arrays):
        rest = iter(arrays)
        return method(module, *(fixed[i] if i in fixed else next(rest) for i in range(nargs)), **options)
    return jax.jit(traced)


def prepare(family: str, matrices, *, square: bool = True, T_A=None, mesh=None, matrix_specs=None,
            donate: bool = False, backend: str = "auto", num_rhs: int = 0):
    """Check the matrices, resolve the call, and place them in a's caller layout.

    Returns (call, arrays, kept): ``kept`` are the arrays to keep as operators; None for
    donated concrete arrays, which the factorisation consumes (``donate=kept is None``). A tracer
    (``jax.jit``, or an eager ``jax.grad``/``jax.jvp``/``jax.vmap``) is always kept, and never
    consumed: the derivatives need it, and under eager differentiation its primal is the
    caller's own buffer.
    """
    call, arrays = setup(family, matrices=matrices, square=square, T_A=T_A, mesh=mesh,
                         matrix_specs=matrix_specs, donate=donate, backend=backend, num_rhs=num_rhs)
    arrays = [_sharded.place(x, call.layout.out_spec, call.grid.mesh) for x in arrays]
    kept = [None if donate and not isinstance(x, jax.core.Tracer) else x for x in arrays]
    return call, arrays, kept


def no_gradient(x):
    """``x`` cut from differentiation (the factor is never differentiated); concrete arrays
    pass through untouched, so that donating them consumes the caller's buffer."""
    return jax.lax.stop_gradient(x) if isinstance(x, jax.core.Tracer) else x

