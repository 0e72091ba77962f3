"""The kernel contract of each family: typed factor states and the protocol that both backends
implement (``jaxmg.kernels.local`` on whole matrices, ``jaxmg.kernels.native`` over the process
grid; a plan's ``kernels`` is the backend of its route).

Every method is trace-only and takes and returns global arrays: on the native backend matrices
in the grid layout (or the caller's, where a method says so), right-hand sides in the layout
``spec`` they are solved in; on the local backend whole matrices as they are. Statuses are int32
scalars (``jaxmg.kernels.status``); every floating output is NaN where the status is not 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional, Protocol

import jax
from jax.sharding import PartitionSpec as P

if TYPE_CHECKING:  # types only: the kernels read a plan, they do not build one
    from .._layout import AnyMesh, Grid


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


class CholeskyKernels(Protocol):
    lower_readable: bool  # lower() can read L from this backend's state
    hermitian: bool  # True: the factored matrix is Hermitian (its inverse too)

    def factor(self, a) -> tuple[CholeskyState, jax.Array]: ...
    def solve(self, state: CholeskyState, b, spec) -> jax.Array: ...
    def logdet(self, state: CholeskyState) -> jax.Array: ...
    def inverse(self, state: CholeskyState) -> jax.Array: ...
    def lower(self, state: CholeskyState) -> jax.Array: ...


class LUKernels(Protocol):
    hermitian: bool  # False
    def factor(self, a) -> tuple[LUState, jax.Array]: ...
    def packed(self, state: LUState) -> jax.Array: ...
    def solve(self, state: LUState, b, spec, trans: str = "N") -> jax.Array: ...
    def inverse(self, state: LUState) -> jax.Array: ...
    def slogdet(self, state: LUState) -> tuple[jax.Array, jax.Array]: ...


class QRKernels(Protocol):
    def factor(self, a) -> tuple[QRState, jax.Array]: ...
    def q(self, state: QRState) -> jax.Array: ...
    def r(self, state: QRState) -> jax.Array: ...
    def diagonal(self, state: QRState) -> jax.Array: ...  # R's diagonal (N,), replicated
    def solve(self, state: QRState, b, spec) -> jax.Array: ...
    def normal_solve(self, state: QRState, y, spec) -> jax.Array: ...


class DecompositionKernels(Protocol):
    def syevd(self, a) -> tuple[jax.Array, jax.Array, jax.Array]: ...
    def sygvd(self, a, b) -> tuple[jax.Array, jax.Array, jax.Array]: ...
    def gesvd(self, a, full_matrices: bool,
              compute_uv: bool = True) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]: ...
    def polar(self, a) -> tuple[jax.Array, jax.Array, jax.Array]: ...
