"""What every factorisation module shares: its plan, the kept operator and status, and the two
ways a module meets the public boundary (``jaxmg._dispatch``): :func:`build` for construction and
:func:`method` for the methods that compute."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax

from .. import _dispatch, _plan
from .._plan import Plan
from ..kernels import status as _status


class Factorisation(eqx.Module):
    """Base of the factorisation modules.

    ``operator`` is the factorised matrix as the caller passed it (a reference, not a copy),
    kept so that derivatives with respect to it can be taken; it is None when the call donated
    it. ``status`` is 0 on success (see each module). ``plan`` is the static description of the
    call (route, mesh, layouts, tile, shape, dtype: ``jaxmg._plan.Plan``); later calls of the
    module's methods run the same way.
    """

    operator: Optional[jax.Array]
    status: jax.Array
    plan: Plan = eqx.field(static=True)

    @property
    def shape(self) -> tuple:
        """The factorised matrix's shape."""
        return self.plan.shape

    @property
    def dtype(self):
        """The factorised matrix's dtype."""
        return self.plan.dtype

    @property
    def route(self) -> str:
        """The route the factorisation took: "local", "batch" or "distributed" (docs/routes.md)."""
        return self.plan.route

    def _masked(self, *outputs):
        """``outputs``, NaN wherever :attr:`status` is not 0 (on every backend)."""
        return _status.masked(self.status, *outputs)


def build(body, family: str, matrices, *, rhs=(), T_A=None, mesh=None, matrix_specs=None, donate: bool = False,
          backend: str = "auto", square: bool = True, tall: bool = True, num_rhs: int = 0, natural: bool = False,
          flags=None, **static):
    """Plan a construction of ``family`` on ``matrices`` (``(name, value)`` pairs) and run
    ``body(plan, *arrays, keep=..., **static)`` through the boundary; returns (plan, outputs).

    ``keep`` tells the body whether to keep the operators: not where a concrete matrix is
    donated (the factorisation consumes it). A tracer (``jax.jit``, or an eager ``jax.grad``,
    ``jax.jvp`` or ``jax.vmap``) is always kept, and never consumed: the derivatives need it, and
    under eager differentiation its primal is the caller's own buffer."""
    flags = dict(flags or {}, donate=donate)
    ctx = _dispatch.context([value for _, value in matrices], [value for _, value in rhs])
    plan, arrays = _plan.resolve(family, ctx, matrices=matrices, rhs=rhs, T_A=T_A, mesh=mesh,
                                 matrix_specs=matrix_specs, backend=backend, square=square, tall=tall,
                                 num_rhs=num_rhs, natural=natural, flags=flags)
    keep = not donate or any(isinstance(x, jax.core.Tracer) for x in arrays[:len(matrices)])
    out = _dispatch.run(body, plan, ctx, arrays, matrices=len(matrices), donate=donate and not keep and plan.donatable,
                        uncommitted=_dispatch.uncommitted_call(mesh, arrays), keep=keep, **static)
    return plan, out


def method(module: Factorisation, body, *args, **static):
    """``body(plan, module, *args, **static)`` through the boundary, with the module's plan (on the
    concrete mesh of its arrays where the module was made inside ``jax.jit`` and is used eagerly)."""
    leaves = jax.tree.leaves(module)
    matrices = [x for x in leaves if getattr(x, "ndim", 0) >= 2][:1]
    ctx = _dispatch.context(matrices, (module, args))
    plan = _plan.module_plan(module.plan, leaves).knowing([x for x in args if hasattr(x, "ndim")])
    return _dispatch.run(body, plan, ctx, (module, *args), matrices=0,
                         uncommitted=_dispatch.uncommitted_call(None, (module, args)), **static)


def no_gradient(x):
    """``x`` cut from differentiation (the factor is never differentiated)."""
    return jax.lax.stop_gradient(x)
