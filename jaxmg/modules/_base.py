"""What every factorisation module shares: its plan, the kept operator and status; and how it
(and every function of ``jaxmg.functional``) calls the public boundary (:func:`build`)."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks, _dispatch
from .._plan import Options, Plan
from ..autodiff import logdet
from ..kernels import status as _status
from . import check as _check


def factored(kernels, plan: Plan, a, *, keep: bool):
    """(state, status, operator) of the factorisation of ``a`` by ``kernels`` (a family's kernels for
    ``plan``), ``a`` entered in the plan's layout (trace-only): the state carries no derivative (the
    rules of ``jaxmg.autodiff`` differentiate through the operator), which is ``a`` where kept, else
    None."""
    state, status = kernels.factor(jax.lax.stop_gradient(plan.enter(a)))
    return jax.lax.stop_gradient(state), status, a if keep else None


def inverse(kernels, plan: Plan, module):
    """a^-1 in a's layout from ``module``'s saved factor by ``kernels`` (trace-only), NaN where its
    status is not 0."""
    operator = _status.derivatives_masked(module.status, module.operator)
    return module._masked(plan.leave(logdet.inverse(kernels, operator, module.state), "the inverse"))


def promoted(module, body, b, **static):
    """``body(plan, module, b, **static)`` (a module's solve) through the boundary, ``b`` and the
    saved factor promoted together as ``jax.scipy.linalg.cho_solve`` and ``lu_solve`` promote
    their factor and right-hand side (``jaxmg._checks.inexact_dtype``): the solution has that
    dtype. A factor of a narrower dtype (float32 with a float64 ``b``, real with a complex one) is
    converted inside the call, its operator too; the factorisation is not repeated."""
    b = _checks.as_array(b, "b")
    dtype = _checks.inexact_dtype(module.dtype, b)
    return _dispatch.method(module, _at_dtype, b.astype(dtype), solve=body, dtype=dtype, static=tuple(static.items()))


def _at_dtype(plan, module, b, *, solve, dtype: np.dtype, static: tuple):
    """``solve`` with the module's plan and arrays in ``dtype`` (trace-only)."""
    if dtype != plan.dtype:
        module = jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.inexact) else x, module)
        plan = dataclasses.replace(plan, dtype=dtype)
    return solve(plan, module, b, **dict(static))


def build(body, family: str, matrices, options: Options, **kwargs):
    """``jaxmg._dispatch.build`` of ``body`` on ``matrices`` with the caller's ``options``, the
    result check's ``check`` resolved (:func:`jaxmg.modules.check.enabled`) for the body, and
    ``kwargs`` (the plan's keywords and the body's static arguments); returns (plan, outputs,
    operators)."""
    return _dispatch.build(body, family, matrices, options, check=_check.enabled(options.check), **kwargs)


@jax.tree_util.register_pytree_node_class
class BoundMethod:
    # A factorisation module's method bound to its module (``module.solve``): called, it calls the
    # function on the module; a pytree whose child is the module (so that ``jax.jit`` of a function
    # of ``module.solve`` traces the module's arrays), as Equinox's own bound method is, made at a
    # fraction of its cost (a plain object, not a module: eager calls bind on every call).
    # Equal where the function and the module are the same objects, as Python's bound methods.

    __slots__ = ("__func__", "__self__", "__weakref__")

    def __init__(self, func: Callable, module: Any):
        self.__func__, self.__self__ = func, module

    def __call__(self, *args, **kwargs):
        return self.__func__(self.__self__, *args, **kwargs)

    @property
    def __doc__(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.__func__.__doc__

    @property
    def __name__(self) -> str:
        return self.__func__.__name__

    @property
    def __wrapped__(self) -> Callable:
        return types.MethodType(self.__func__, self.__self__)

    def __eq__(self, other: object) -> bool:
        return type(other) is BoundMethod and other.__func__ is self.__func__ and other.__self__ is self.__self__

    def __hash__(self) -> int:
        return hash((self.__func__, id(self.__self__)))

    def __repr__(self) -> str:
        return f"<bound method {self.__func__.__qualname__} of {type(self.__self__).__name__}>"

    def tree_flatten(self):
        return (self.__self__,), self.__func__

    @classmethod
    def tree_unflatten(cls, func: Callable, children) -> BoundMethod:
        return cls(func, *children)


class _Method:
    """A method of a factorisation module's class: read from a module, a :class:`BoundMethod`
    (Equinox would make a bound-method module of its own on every read, which costs more than
    the eager call it precedes); read from the class, the function."""

    def __init__(self, func: Callable):
        self.func = func
        self.__doc__, self.__name__, self.__wrapped__ = func.__doc__, func.__name__, func

    def __get__(self, module, owner=None):
        return self.func if module is None else BoundMethod(self.func, module)


class Factorisation(eqx.Module):
    """Base of the factorisation modules.

    ``operator`` is the factorised matrix as the caller passed it (a reference, not a copy, for
    derivatives; None when the call donated it). ``status`` is 0 on success (see each module).
    ``plan`` (``jaxmg._plan.Plan``: route, mesh, layouts, tile, shape, dtype) describes the call;
    the module's methods run the same way. A subclass's methods are bound as
    :class:`BoundMethod` (its functions other than ``__init__`` and the like).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if isinstance(value, types.FunctionType) and not (name.startswith("__") and name.endswith("__")):
                setattr(cls, name, _Method(value))

    operator: Optional[jax.Array]
    status: jax.Array
    plan: Plan = eqx.field(static=True)
    #: The fields that hold the caller's matrices (kept for the derivatives).
    kept: ClassVar[tuple] = ("operator",)

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

    def held(self, place: Callable) -> Factorisation:
        """This module with ``place`` applied to each matrix it keeps (:data:`kept`; None stays None)."""
        kept = lambda m: [getattr(m, name) for name in self.kept]  # noqa: E731
        return eqx.tree_at(kept, self, [place(x) for x in kept(self)], is_leaf=lambda x: x is None)

    def _masked(self, *outputs):
        """``outputs``, NaN wherever :attr:`status` is not 0 (on every backend); computed from
        the operator masked by :func:`jaxmg.kernels.status.derivatives_masked`, which makes their
        derivatives NaN there too."""
        return _status.masked(self.status, *outputs, derivatives=False)
