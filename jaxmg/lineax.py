"""Lineax solvers backed by jaxmg: distributed Cholesky, LU and QR for ``lineax.linear_solve``.

Lineax (https://docs.kidger.site/lineax) is an optional dependency: ``pip install lineax``
(or ``pip install ".[lineax]"`` in jaxmg's source folder).
The five solvers are ``lineax.AbstractLinearSolver`` subclasses and slot into Lineax
wherever its own solvers do:

```python
import lineax as lx
import jaxmg.lineax

operator = lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag)  # a may be sharded
x = lx.linear_solve(operator, b, solver=jaxmg.lineax.Auto()).value
```

- [`Cholesky`][jaxmg.lineax.Cholesky] for positive (or negative) definite operators, [`LU`][jaxmg.lineax.LU] for square
  nonsingular ones, [`QR`][jaxmg.lineax.QR] for full-rank rectangular ones (least squares when tall,
  the minimum-norm solution when wide), [`SVD`][jaxmg.lineax.SVD] for operators of any shape and rank
  (the pseudo-inverse solution), and [`Auto`][jaxmg.lineax.Auto], which picks one of these from the
  operator's tags and shape (and ``well_posed``, as ``lineax.AutoLinearSolver``).
- When the operator's matrix (``operator.as_matrix()``) is sharded over a mesh, the
  factorisation and the solves run distributed on that mesh through jaxmg (cuSOLVERMp on
  NVIDIA GPUs, else the portable backend); the layout rules are jaxmg's.
- ``init`` factors once; the state it returns is reused by ``linear_solve(..., state=...)``,
  and ``transpose``/``conj`` only flip flags on it (never a refactorisation).
- A failed factorisation (singular, not positive definite, numerically rank deficient:
  jaxmg's ``status`` != 0) gives ``lineax.RESULTS.singular``: ``linear_solve(..., throw=True)`` raises
  it and ``throw=False`` returns it in ``Solution.result`` (the value is then NaN). On a mesh of
  more than one device the solver raises it itself, on every device, unless it is made with
  ``throw=False`` too: ``linear_solve(op, b, solver=jaxmg.lineax.LU(throw=False), throw=False)``
  (Lineax does not tell a solver its ``throw``, and its own check, on one device, would stop
  that device while the others wait for it).
- Options, fields of every solver (``jaxmg.lineax.LU(T_A=2048, backend="portable")``), as
  the arguments of ``jaxmg.potrs``: ``T_A``, the native tile size (None picks one); ``mesh``
  (default: the matrix's own mesh, else the context mesh, else one device); ``matrix_specs``
  (default: from the matrix's sharding); ``backend``, ``"auto"``, ``"portable"`` or ``"native"``;
  ``check``, the result check of the distributed route (None: on unless ``JAXMG_RESULT_CHECK=0``;
  False turns it off for this solver); and ``throw`` (default True): whether a failure on a mesh
  of more than one device raises on every device (True) or is returned as ``RESULTS.singular``
  for ``linear_solve(..., throw=False)`` (False).
- Derivatives and ``jax.vmap`` are Lineax's own: ``jax.grad`` through ``linear_solve`` and
  ``jax.vmap`` over operators and vectors work as with Lineax's solvers. ``Cholesky``, ``LU``
  and ``QR`` assume a full-rank operator (``assume_full_rank()`` is True), as Lineax's own
  do; ``SVD`` does not, as Lineax's ``SVD``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Optional

try:
    import lineax as lx
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "jaxmg.lineax needs Lineax, which is not installed; install it with pip install lineax "
        '(or, in jaxmg\'s source folder, pip install ".[lineax]").'
    ) from error

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from . import _context, _sharded, modules
from ._checks import check_backend, check_flag, check_tile
from ._dense import adjoint, kept_reciprocals, matmul
from ._typing import MeshLike, Specs
from .kernels import status as _status
from .modules import check as result_check
from .modules._base import Factorisation

__all__ = ["Auto", "Cholesky", "LU", "QR", "SVD"]


def __dir__() -> list:
    """The module's public names (its solvers), not its imports."""
    return sorted(__all__)


class _Structure(eqx.Module):
    """A vector pytree's layout: its tree and each leaf's (shape, dtype); hashable."""

    treedef: Any = eqx.field(static=True)
    leaves: tuple = eqx.field(static=True)

    @classmethod
    def of(cls, structure) -> _Structure:
        leaves, treedef = jax.tree_util.tree_flatten(structure)
        return cls(treedef, tuple((tuple(x.shape), jnp.dtype(x.dtype)) for x in leaves))

    def flatten(self, vector) -> jax.Array:
        """``vector`` (a pytree of this structure) as one 1-D array."""
        leaves = jax.tree_util.tree_leaves(vector)
        if len(leaves) == 1:
            return jnp.reshape(leaves[0], (-1,))
        return jnp.concatenate([jnp.reshape(x, (-1,)) for x in leaves])

    def unflatten(self, x: jax.Array):
        """1-D ``x`` as a pytree of this structure: each leaf in its own dtype (the real part for
        a real leaf, as ``jax.flatten_util.ravel_pytree`` unravels)."""
        pieces, start = [], 0
        for shape, dtype in self.leaves:
            size = math.prod(shape)
            piece = jnp.reshape(x[start : start + size], shape)
            if jnp.iscomplexobj(piece) and not jnp.issubdtype(dtype, jnp.complexfloating):
                piece = jnp.real(piece)  # a real leaf of a pytree that flatten promoted to complex
            pieces.append(piece.astype(dtype))
            start += size
        return jax.tree_util.tree_unflatten(self.treedef, pieces)


class _State(eqx.Module):
    """A factorised matrix ``M`` and the current operator ``op(M)``: ``M`` transposed when
    ``transposed``, conjugated when ``conjugated``, negated when ``negated``;
    ``in_structure``/``out_structure`` are the current operator's vector structures."""

    factor: Factorisation
    transposed: bool = eqx.field(static=True)
    conjugated: bool = eqx.field(static=True)
    negated: bool = eqx.field(static=True)
    in_structure: _Structure = eqx.field(static=True)
    out_structure: _Structure = eqx.field(static=True)


class _Options(eqx.Module):
    """The options of the jaxmg call that factors the operator's matrix, which every solver
    (``Auto`` too) takes."""

    T_A: Optional[int] = eqx.field(default=None, static=True)
    mesh: MeshLike = eqx.field(default=None, static=True)
    matrix_specs: Specs = eqx.field(default=None, static=True)
    backend: str = eqx.field(default="auto", static=True)
    throw: bool = eqx.field(default=True, static=True)
    check: Optional[bool] = eqx.field(default=None, static=True)

    def __check_init__(self):
        check_tile(self.T_A)
        check_backend(self.backend)
        check_flag(self.throw, "throw")
        if self.check is not None:
            result_check.enabled(self.check)  # refuses a value other than True, False or None

    def _options(self) -> dict:
        """The keywords of the jaxmg call that factors the operator's matrix."""
        return dict(
            T_A=self.T_A, mesh=self.mesh, matrix_specs=self.matrix_specs, backend=self.backend, check=self.check
        )

    def assume_full_rank(self) -> bool:
        """True: every jaxmg solver needs a full-rank operator (as Lineax's Cholesky, LU, QR)."""
        return True


class _JaxmgSolver(_Options, lx.AbstractLinearSolver[_State]):
    """What the jaxmg solvers share: the options of the jaxmg call, the vector plumbing,
    transpose/conj as flags on the state and the status-to-result mapping. A subclass gives
    ``_factor(matrix, operator)`` -> (factorisation module, transposed, negated) and
    ``_solve(state, b)`` (b and x 1-D, for ``op(M)`` with ``conjugated`` already handled)."""

    #: The jaxmg module that ``init`` factors the operator's matrix with.
    _module: ClassVar[type]

    def _made_here(self, state) -> bool:
        """Whether ``state`` is one that this solver's :meth:`init` makes."""
        return isinstance(state, _State) and isinstance(state.factor, self._module)

    def init(self, operator: lx.AbstractLinearOperator, options: dict[str, Any]) -> _State:
        """Factor ``operator.as_matrix()`` with jaxmg (distributed when it is sharded)."""
        del options
        if not isinstance(operator, lx.AbstractLinearOperator):
            raise TypeError(
                f"{type(self).__name__}.init: operator must be a lineax linear operator, got {type(operator).__name__}."
            )
        factor, transposed, negated = self._factor(operator.as_matrix(), operator)
        return _State(
            factor,
            transposed,
            False,
            negated,
            _Structure.of(operator.in_structure()),
            _Structure.of(operator.out_structure()),
        )

    def compute(self, state: _State, vector, options: dict[str, Any]):
        """Solve ``operator @ x = vector``; returns (x, result, stats)."""
        del options
        _check_state(self, state, self._made_here)
        b = state.out_structure.flatten(vector)
        if state.conjugated:  # conj(A) x = b  <=>  A conj(x) = conj(b)
            b = jnp.conj(b)
        x = self._solve(state, b)
        status = _sharded.on_mesh_of(x, self._solve_status(state))
        x = _status.masked(status, x)
        if state.conjugated:
            x = jnp.conj(x)
        if state.negated:
            x = -x
        if self.throw:
            status = _raise_on_every_device(status, state.factor, type(self).__name__)
        return state.in_structure.unflatten(x), _result(status, x), {}

    def transpose(self, state: _State, options: dict[str, Any]):
        """The state of ``operator.T``: a flag flip, no new factorisation."""
        _check_state(self, state, self._made_here)
        return _State(
            state.factor, not state.transposed, state.conjugated, state.negated, state.out_structure, state.in_structure
        ), options

    def conj(self, state: _State, options: dict[str, Any]):
        """The state of ``conj(operator)``: a flag flip, no new factorisation."""
        _check_state(self, state, self._made_here)
        return _State(
            state.factor, state.transposed, not state.conjugated, state.negated, state.in_structure, state.out_structure
        ), options

    def _solve_status(self, state: _State) -> jax.Array:
        """The solve's status: the factorisation's."""
        return state.factor.status

    def _factor(self, matrix, operator):  # pragma: no cover - abstract
        raise NotImplementedError

    def _solve(self, state: _State, b):  # pragma: no cover - abstract
        raise NotImplementedError


def _is_auto_state(state) -> bool:
    """Whether ``state`` is one that :meth:`Auto.init` makes."""
    return isinstance(state, _AutoState)


def _check_state(solver: lx.AbstractLinearSolver, state, made_by) -> None:
    """Raise a TypeError naming ``state`` where ``made_by(state)`` is False: a state that
    ``solver``'s own ``init`` did not make (another solver's, passed to ``linear_solve(...,
    state=...)``)."""
    if made_by(state):
        return
    name = type(solver).__name__
    inner = getattr(state, "factor", None)
    found = type(state).__name__ if inner is None else f"{type(state).__name__} of a {type(inner).__name__}"
    raise TypeError(
        f"jaxmg.lineax.{name}: state must be made by jaxmg.lineax.{name}().init(operator, options) (or "
        f"linear_solve(..., solver=jaxmg.lineax.{name}()).state), got a {found}; pass the state of the "
        "solver that solves, or no state."
    )


def _result(status: jax.Array, x: jax.Array):
    """Lineax's result of a solve of ``status``: ``RESULTS.singular`` where it is not 0. Its code
    is typed on the mesh of the solution ``x`` (``RESULTS.where`` makes it at compile time, with
    no mesh), so that a solve traced one matrix at a time and batched over an Explicit mesh axis
    (``jax.vmap`` of a stack split over it) has a result code per matrix in the stack's layout."""
    result = lx.RESULTS.where(status == 0, lx.RESULTS.successful, lx.RESULTS.singular)
    return eqx.tree_at(lambda r: r._value, result, _sharded.on_mesh_of(x, result._value))


def _raise_on_every_device(status: jax.Array, factor: Factorisation, name: str) -> jax.Array:
    """``status`` (a scalar, the same on every device), after a check that raises Lineax's
    ``RESULTS.singular`` error on every device of the factorisation's mesh where it is not 0 (a
    solver made with ``throw=True``, the default; a mesh of one device is left to Lineax):
    Lineax's own check raises on one device while the others wait for it in a collective (until
    XLA aborts the process); checked on every device at once, the error is raised and catchable."""
    mesh = factor.plan.mesh
    if mesh is None or mesh.size <= 1:
        return status
    _refuse_a_split_stack(status, name)

    def check(s):
        result = lx.RESULTS.where(s == 0, lx.RESULTS.successful, lx.RESULTS.singular)
        return result.error_if(s, result != lx.RESULTS.successful)

    return jax.shard_map(check, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(), check_vma=False)(status)


def _refuse_a_split_stack(status: jax.Array, name: str) -> None:
    """Raise where ``status`` is one of a stack's statuses under ``jax.vmap`` whose batch axis an
    Explicit mesh axis splits (each device holds and solves its own matrices). JAX cannot batch
    the check of :func:`_raise_on_every_device` over that axis (a callback cannot run where it is
    left automatic), and Lineax's own check would run on the devices of the failed matrix alone,
    in a collective that the others never join (the process stops): failures are results there."""
    stack = _context.stack_of(status)
    if stack is None or stack.sharding is None or tuple(stack.sharding.spec)[:1] == (None,):
        return
    axes = tuple(stack.sharding.spec)[0]
    raise ValueError(
        f"jaxmg.lineax.{name}(throw=True) cannot raise a failure under jax.vmap over a stack split over "
        f"its batch axis by the Explicit mesh axis {axes!r}: a failed matrix would stop only the devices "
        f"that hold it. Pass throw=False to the solver and to linear_solve, and read each matrix's "
        f"result: lx.linear_solve(op, b, solver=jaxmg.lineax.{name}(throw=False), throw=False).result "
        f"(or use Auto mesh axes)."
    )


def _square(operator, name: str) -> None:
    if operator.in_size() != operator.out_size():
        raise ValueError(
            f"jaxmg.lineax.{name} needs a square operator, got {operator.out_size()} x "
            f"{operator.in_size()}; use jaxmg.lineax.QR (or Auto) for rectangular operators."
        )


class Cholesky(_JaxmgSolver):
    """Cholesky solver (jaxmg's distributed ``Cholesky``) for positive or negative definite operators.

    The operator must be square and tagged ``lineax.positive_semidefinite_tag`` or
    ``lineax.negative_semidefinite_tag`` (a negative definite operator is solved as
    ``-(-A)^-1 b``), and nonsingular. Only the lower triangle of its matrix is read.
    A matrix that is not positive definite gives ``RESULTS.singular``.

    Options (fields): ``T_A``, ``mesh``, ``matrix_specs``, ``backend``, ``check``, as described in
    [`jaxmg.lineax`][jaxmg.lineax].
    """

    _module = modules.Cholesky

    def _factor(self, matrix, operator):
        negative = lx.is_negative_semidefinite(operator)
        if not (lx.is_positive_semidefinite(operator) or negative):
            raise ValueError(
                "jaxmg.lineax.Cholesky needs an operator tagged lineax.positive_semidefinite_tag "
                "(or negative_semidefinite_tag), e.g. lx.MatrixLinearOperator(a, "
                "lx.positive_semidefinite_tag); use jaxmg.lineax.LU or Auto for other operators."
            )
        _square(operator, "Cholesky")
        return modules.Cholesky(-matrix if negative else matrix, **self._options()), False, negative

    def _solve(self, state, b):
        assert isinstance(state.factor, modules.Cholesky), "compute checked the state (_check_state)"
        # The operator is Hermitian: its transpose is its conjugate.
        if state.transposed:
            return jnp.conj(state.factor.solve(jnp.conj(b)))
        return state.factor.solve(b)


class LU(_JaxmgSolver):
    """LU solver (jaxmg's distributed ``LU``, partial pivoting) for square nonsingular operators.

    Transposed solves (Lineax's reverse mode) reuse the factor with ``trans="T"``. A
    singular matrix (a zero pivot) gives ``RESULTS.singular``.

    Options (fields): ``T_A``, ``mesh``, ``matrix_specs``, ``backend``, ``check``, as described in
    [`jaxmg.lineax`][jaxmg.lineax].
    """

    _module = modules.LU

    def _factor(self, matrix, operator):
        _square(operator, "LU")
        return modules.LU(matrix, **self._options()), False, False

    def _solve(self, state, b):
        assert isinstance(state.factor, modules.LU), "compute checked the state (_check_state)"
        return state.factor.solve(b, trans="T" if state.transposed else "N")


class QR(_JaxmgSolver):
    """QR solver (jaxmg's distributed reduced ``QR``) for full-rank operators of any shape.

    A tall or square operator (M >= N) gets the least-squares solution; a wide one
    (M < N) is factored through its transpose and gets the minimum-norm solution. The
    transposed operator (Lineax's reverse mode) reuses the same factor: its minimum-norm
    solution is ``Q R^-H b`` from the saved factor, with no Q formed. A numerically
    rank-deficient matrix (a diagonal entry of R below ``rcond * max|R_ii|``) gives
    ``RESULTS.singular`` and a NaN value. For a wide operator the factored matrix is its
    transpose, which ``matrix_specs`` then describes.

    Options (fields): ``T_A``, ``mesh``, ``matrix_specs``, ``backend``, ``check``, as described in
    [`jaxmg.lineax`][jaxmg.lineax], and ``rcond`` (a Python float, as in
    ``jnp.linalg.lstsq``: None, the default, for ``max(M, N) * eps`` of the dtype; negative for
    ``eps``).
    """

    rcond: Optional[float] = eqx.field(default=None, static=True)
    _module = modules.QR

    def _solve_status(self, state):
        assert isinstance(state.factor, modules.QR), "compute checked the state (_check_state)"
        return state.factor.rank_status(self.rcond)

    def _factor(self, matrix, operator):
        wide = operator.out_size() < operator.in_size()
        matrix = matrix.T if wide else matrix
        return modules.QR(matrix, **self._options()), wide, False

    def _solve(self, state, b):
        factor = state.factor
        assert isinstance(factor, modules.QR), "compute checked the state (_check_state)"
        if not state.transposed:  # tall M: least squares
            return factor.solve(b, rcond=self.rcond)
        # wide M^T = conj(M)^H: the minimum-norm x is conj(Q R^-H conj(b)) from M's factor.
        return jnp.conj(factor._adjoint_solve(jnp.conj(b)))


class SVD(_JaxmgSolver):
    """SVD solver (jaxmg's ``SVD``) for operators of any shape and rank: the pseudo-inverse
    solution ``x = pinv(A) b`` (least squares of least norm), as ``lineax.SVD``.

    Singular values at or below ``rcond * s[0]`` count as zero, with ``rcond`` read as Lineax
    reads it (None: ``2 * max(M, N) * eps``; negative: ``eps``). A rank-deficient operator is
    no failure (``RESULTS.successful``); a non-finite decomposition (jaxmg's ``status`` -1) gives
    ``RESULTS.singular``. Transposed solves (Lineax's derivatives) reuse the decomposition:
    ``pinv(A^T) b = conj(U S^+ V^H conj(b))``. ``assume_full_rank()`` is False, as Lineax's SVD's,
    so that Lineax differentiates the pseudo-inverse in full.

    Options (fields): ``T_A``, ``mesh``, ``matrix_specs``, ``backend``, ``check``, as described in
    [`jaxmg.lineax`][jaxmg.lineax], and ``rcond`` (a Python float).
    """

    rcond: Optional[float] = eqx.field(default=None, static=True)
    _module = modules.SVD

    def assume_full_rank(self) -> bool:
        """False: any rank is solved (as Lineax's SVD)."""
        return False

    def _factor(self, matrix, operator):
        return modules.SVD(matrix, **self._options()), False, False

    def _solve(self, state, b):
        factor = state.factor
        assert isinstance(factor, modules.SVD), "compute checked the state (_check_state)"
        u, s, vh = factor.u, factor.s, factor.vh
        m, n = factor.shape
        eps = float(jnp.finfo(s.dtype).eps)
        rcond = _status.checked_rcond(self.rcond)
        rcond = 2 * max(m, n) * eps if rcond is None else (eps if rcond < 0 else rcond)  # Lineax's reading
        kept = s > rcond * jnp.max(s, initial=0)
        s_inv = kept_reciprocals(s, kept, u.dtype)
        if state.transposed:  # pinv(A^T) b = conj(pinv(A^H) conj(b)), pinv(A^H) = U S^+ V^H
            return jnp.conj(matmul(u, s_inv * matmul(vh, jnp.conj(b))))
        return matmul(adjoint(vh), s_inv * matmul(adjoint(u), b))  # pinv(A) = V S^+ U^H


class _AutoState(eqx.Module):
    """Auto's state: the chosen solver and its state."""

    solver: _JaxmgSolver = eqx.field(static=True)
    inner: _State


class Auto(_Options, lx.AbstractLinearSolver[_AutoState]):
    """Picks a jaxmg solver from the operator: positive or negative semidefinite tag ->
    [`Cholesky`][jaxmg.lineax.Cholesky]; square -> [`LU`][jaxmg.lineax.LU]; rectangular -> [`QR`][jaxmg.lineax.QR]
    (least squares or minimum norm).

    ``well_posed`` reads as in ``lineax.AutoLinearSolver``: None (the default) picks as above;
    True takes square operators only (a rectangular one raises ValueError, as Lineax's does);
    False picks [`SVD`][jaxmg.lineax.SVD] for every operator (the pseudo-inverse solution, any
    rank).

    The state is the chosen solver's; it never changes after ``init`` (``transpose`` and
    ``conj`` keep the choice).

    Options (fields): ``T_A``, ``mesh``, ``matrix_specs``, ``backend``, ``check``, as described in
    [`jaxmg.lineax`][jaxmg.lineax], and ``well_posed``.
    """

    well_posed: Optional[bool] = eqx.field(default=None, static=True)

    def __check_init__(self):
        if self.well_posed is not None and not isinstance(self.well_posed, (bool, np.bool_)):
            raise TypeError(
                f"well_posed must be None, True or False (as in lineax.AutoLinearSolver), got {self.well_posed!r}."
            )

    def assume_full_rank(self) -> bool:
        """As ``lineax.AutoLinearSolver``'s: False only for ``well_posed=False`` (the SVD)."""
        return self.well_posed is not False

    def select(self, operator: lx.AbstractLinearOperator) -> _JaxmgSolver:
        """The solver that ``Auto`` uses for ``operator`` (with Auto's options)."""
        if self.well_posed and operator.in_size() != operator.out_size():
            raise ValueError(
                f"jaxmg.lineax.Auto(well_posed=True) needs a square operator, got {operator.out_size()} x "
                f"{operator.in_size()}; for least squares use jaxmg.lineax.Auto() (well_posed=None: QR, full "
                "rank) or jaxmg.lineax.Auto(well_posed=False) (SVD, any rank)."
            )
        if self.well_posed is False:
            return SVD(**self._options(), throw=self.throw)
        if lx.is_positive_semidefinite(operator) or lx.is_negative_semidefinite(operator):
            kind = Cholesky
        elif operator.in_size() == operator.out_size():
            kind = LU
        else:
            kind = QR
        return kind(**self._options(), throw=self.throw)

    def init(self, operator, options):
        solver = self.select(operator)
        return _AutoState(solver, solver.init(operator, options))

    def compute(self, state, vector, options):
        _check_state(self, state, _is_auto_state)
        return state.solver.compute(state.inner, vector, options)

    def transpose(self, state, options):
        _check_state(self, state, _is_auto_state)
        inner, options = state.solver.transpose(state.inner, options)
        return _AutoState(state.solver, inner), options

    def conj(self, state, options):
        _check_state(self, state, _is_auto_state)
        inner, options = state.solver.conj(state.inner, options)
        return _AutoState(state.solver, inner), options
