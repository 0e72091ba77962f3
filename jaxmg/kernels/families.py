"""The kernel contract of each family: typed factor states, the protocol that both backends
implement (``jaxmg.kernels.local`` on whole matrices, ``jaxmg.kernels.native`` over the process
grid), and :class:`Backend`, the typed value that each of them exports as ``BACKEND`` and that a
call's plan holds (chosen once, by ``jaxmg._plan.resolve``).

Every method is trace-only and takes and returns global arrays: on the native backend matrices
in the grid layout (or the caller's, where a method says so), right-hand sides in the layout
``spec`` they are solved in; on the local backend whole matrices as they are. Statuses are int32
scalars (``jaxmg.kernels.status``); every floating output is NaN where the status is not 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Optional, Protocol, runtime_checkable

import jax
from jax.sharding import PartitionSpec as P

if TYPE_CHECKING:  # types only: the kernels read a plan, they do not build one
    from .._layout import AnyMesh, Grid


@runtime_checkable  # annotations that a run-time type checker can check
class KernelPlan(Protocol):
    """What the kernels read from a call's plan (``jaxmg._plan.Plan``): where it runs, a's shape,
    the native tile and Cholesky order, and the caller's layout of ``a``."""

    @property
    def mesh(self) -> Optional[AnyMesh]: ...
    @property
    def grid(self) -> Optional[Grid]: ...
    @property
    def spec(self) -> Optional[P]: ...
    @property
    def tile(self) -> int: ...
    @property
    def shape(self) -> tuple: ...
    @property
    def natural(self) -> bool: ...
    @property
    def local(self) -> bool: ...


class CholeskyState(NamedTuple):
    """The Cholesky factor: L (native ``natural=True``; the local backend keeps the column-major
    factor that potrf leaves as the row-major array of the same bytes, L^T in its upper
    triangle), or cuSOLVERMp's factor of a tile-permuted matrix in a's own buffer (native,
    default)."""

    factor: jax.Array


class LUState(NamedTuple):
    """The LU factor (packed L and U, the backend's order; the local backend keeps getrf's
    column-major factor as the row-major array of the same bytes) and the pivots (replicated)."""

    lu: jax.Array
    pivots: jax.Array


class QRState(NamedTuple):
    """The QR factor: (Q, R) on the local backend; (Householder vectors in the block-cyclic
    layout, their scalars tau) on the native one."""

    factor: jax.Array
    aux: jax.Array


@runtime_checkable  # annotations that a run-time type checker can check
class CholeskyKernels(Protocol):
    @property
    def lower_readable(self) -> bool: ...  # lower() can read L from this backend's state
    @property
    def hermitian(self) -> bool: ...  # True: the factored matrix is Hermitian (its inverse too)

    def factor(self, a) -> tuple[CholeskyState, jax.Array]: ...
    def solve(self, state: CholeskyState, b, spec) -> jax.Array: ...
    def logdet(self, state: CholeskyState) -> jax.Array: ...
    def inverse(self, state: CholeskyState) -> jax.Array: ...
    def lower(self, state: CholeskyState) -> jax.Array: ...


@runtime_checkable  # annotations that a run-time type checker can check
class LUKernels(Protocol):
    @property
    def hermitian(self) -> bool: ...  # False
    def factor(self, a) -> tuple[LUState, jax.Array]: ...
    def packed(self, state: LUState) -> jax.Array: ...
    def packed_tangent(self, state: LUState, packed: jax.Array, a_dot) -> jax.Array: ...
    def solve(self, state: LUState, b, spec, trans: str = "N") -> jax.Array: ...
    def inverse(self, state: LUState) -> jax.Array: ...
    def slogdet(self, state: LUState) -> tuple[jax.Array, jax.Array]: ...


@runtime_checkable  # annotations that a run-time type checker can check
class QRKernels(Protocol):
    def factor(self, a) -> tuple[QRState, jax.Array]: ...
    def q(self, state: QRState) -> jax.Array: ...
    def r(self, state: QRState) -> jax.Array: ...
    def diagonal(self, state: QRState) -> jax.Array: ...  # R's diagonal (N,), replicated
    def solve(self, state: QRState, b, spec) -> jax.Array: ...
    def normal_solve(self, state: QRState, y, spec) -> jax.Array: ...
    def minimum_norm(self, state: QRState, b, spec) -> jax.Array: ...  # Q R^-H b: least-norm x of A^H x = b


@runtime_checkable  # annotations that a run-time type checker can check
class DecompositionKernels(Protocol):
    def syevd(self, a) -> tuple[jax.Array, jax.Array, jax.Array]: ...
    def sygvd(self, a, b) -> tuple[jax.Array, jax.Array, jax.Array]: ...
    def gesvd(
        self, a, full_matrices: bool, compute_uv: bool = True
    ) -> tuple[Optional[jax.Array], jax.Array, Optional[jax.Array], jax.Array]: ...
    # (u_p, h, status); with eigen, (u_p, h, sig, vv, status) with h = vv diag(sig) vv^H, for derivatives
    def polar(self, a, eigen: bool = False) -> tuple[jax.Array, ...]: ...


@dataclasses.dataclass(frozen=True)
class Backend:
    """A backend: for each family, the class whose instance for a call's plan runs that family's
    kernels (``backend.cholesky(plan).factor(a)``). Each field is typed with its family's
    protocol, so that the type checker proves that a backend's classes implement the contract
    (``jaxmg.kernels.local.BACKEND``, ``jaxmg.kernels.native.BACKEND``). Frozen and hashable: it is
    part of the plan, a static argument of the compiled calls and the derivative rules.

    name: "local" (a device's own solver on whole matrices) or "native" (cuSOLVERMp over the
      process grid).
    """

    name: str
    cholesky: Callable[[KernelPlan], CholeskyKernels]
    lu: Callable[[KernelPlan], LUKernels]
    qr: Callable[[KernelPlan], QRKernels]
    decompositions: Callable[[KernelPlan], DecompositionKernels]
