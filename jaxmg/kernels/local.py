"""The local backend: a device's own dense solver on whole matrices (JAX's ``lax.linalg``: cuSOLVER
on a GPU, LAPACK on a CPU), with jaxmg's status values.

Hermitian eigenproblems are solved by the solver that ``jaxmg.kernels.two_stage.TWO_STAGE_ABOVE``
names for the platform (``two_stage.device_eigh``: the platform's own syevd, or the two-stage
solver above a measured order).

It serves the local route (inside a user's ``jax.shard_map``, on one device, or on a matrix
gathered from a mesh: the ``portable`` backend) and, under ``jax.vmap``, the batch route. The
arrays are taken as they are: the plan places them (``jaxmg._plan``). Conventions shared with the
native backend (``jaxmg.kernels.families``): only the lower triangle of a Hermitian matrix is
read; status 0 on success, else LAPACK's ``info``, or -1 for a result that is not finite.

On one NVIDIA GPU with the native library loaded, inverses from a factor are the library's
cuBLAS calls (``jaxmg.kernels.ffi.gemm``: LAPACK's potri and getri, one call each, in the
factor's buffer); else they are solves against the identity, as ``jnp.linalg.inv`` does.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from .. import _layout
from .._dense import adjoint, householder_qr
from . import qdwh, status as _status, two_stage
from .algebra import batched_like, by_platform, matmul, permutation_matrix, slogdet_of
from .families import Backend, CholeskyState, KernelPlan, LUState, QRState
from .ffi import gemm, relayout
from .ffi.solver import getrf, pivoted_lu_tangent, potrf

_TRANS = {"N": 0, "T": 1, "C": 2}


def _as_matrix(b):
    return b[:, None] if b.ndim == 1 else b


def _like_rhs(x, b):
    return x[:, 0] if b.ndim == 1 else x


def _eye_like(a):
    return jnp.eye(a.shape[-1], dtype=a.dtype)


@dataclasses.dataclass(frozen=True)
class _Local:
    """What the local families share: the plan (hashable: the kernels are static arguments of
    the derivative rules), or None for the per-shard layer's device solver on a gathered matrix
    (``jaxmg.ops.local``), which has no mesh and so no one-GPU cuBLAS calls."""

    plan: Optional[KernelPlan]

    @property
    def cublas(self) -> bool:
        """Whether the library's one-GPU cuBLAS calls serve this call: one matrix, not a stack,
        on an NVIDIA GPU with the native library loaded (never without a plan)."""
        if self.plan is None:
            return False
        return self.plan.local and _one_gpu_library(self.plan.mesh)


def _one_gpu_library(mesh) -> bool:
    if _layout.platform(mesh) not in ("gpu", "cuda"):
        return False
    return gemm.available()


def _kept(factor):
    """A factor that potrf or getrf leaves column-major, kept as the row-major array of the same
    bytes (its transpose; XLA lays the transpose out as a bitcast): returned from a compiled call
    (a module's state, a donated matrix's buffer) it is not transposed into a second matrix."""
    return jnp.swapaxes(factor, -1, -2)


def _factor(kept):
    """The factor itself (column-major, the same bytes) from what :func:`_kept` made."""
    return jnp.swapaxes(kept, -1, -2)


class Cholesky(_Local):
    """A = L L^H; the state is the factor with L in its lower triangle (the other is not read),
    kept transposed (:func:`_kept`)."""

    lower_readable = True
    hermitian = True

    def factor(self, a):
        chol, info = potrf(a)  # in a's buffer where a is not used afterwards
        return CholeskyState(_kept(chol)), _status.cholesky_status(info, chol)  # outputs are masked by the status

    def solve(self, state, b, spec=None):
        chol = _factor(state.factor)
        y = solve_triangular(chol, _as_matrix(b), lower=True)
        return _like_rhs(solve_triangular(chol, y, lower=True, trans="C"), b)

    def logdet(self, state):
        return 2 * jnp.sum(jnp.log(jnp.real(jnp.diagonal(state.factor, axis1=-2, axis2=-1))), axis=-1)

    def inverse(self, state):
        if self.cublas:
            return gemm.hermitian_inverse(_factor(state.factor), column_major=True)  # from potrf's layout, row-major
        return self.solve(state, _eye_like(state.factor))  # two triangular solves in the identity's buffer

    def lower(self, state):
        return lower_of(_factor(state.factor))


class LU(_Local):
    """P A = L U with partial pivoting; the state is LAPACK's packed factor, kept transposed
    (:func:`_kept`), and its pivots."""

    hermitian = False

    def factor(self, a):
        lu, pivots = getrf(a)  # in a's buffer where a is not used afterwards
        return LUState(_kept(lu), pivots), _status.first_bad_pivot(jnp.diagonal(lu, axis1=-2, axis2=-1))

    def packed(self, state):
        """LAPACK's packed factor (L's strict lower triangle, U's upper one), as JAX's ``lu`` gives it."""
        return _factor(state.lu)

    def packed_tangent(self, state, packed, a_dot):
        """The tangent of :meth:`packed` along a' (that of ``jax.scipy.linalg.lu_factor``)."""
        return pivoted_lu_tangent(packed, state.pivots, a_dot)

    def solve(self, state, b, spec=None, trans: str = "N"):
        rhs = batched_like(_as_matrix(b), state.pivots)  # the pivots' gather of b keeps their layout
        x = jax.scipy.linalg.lu_solve((self.packed(state), state.pivots), rhs, trans=_TRANS[trans])
        return _like_rhs(x, b)

    def inverse(self, state):
        perm = lax.linalg.lu_pivots_to_permutation(state.pivots, state.lu.shape[-1])
        if self.cublas:
            return gemm.lu_inverse(self.packed(state), perm)  # getri in the factor's buffer (getrf's layout)
        return _lu_inverse(self.packed(state), perm)

    def slogdet(self, state):
        return slogdet_of(jnp.diagonal(state.lu), state.pivots, 1)


def lower_of(factor):
    """``tril(factor)`` (..., n, n), row-major, from the column-major factor that potrf leaves: on
    an NVIDIA GPU with the native library loaded, moved in the factor's own buffer
    (:mod:`.ffi.relayout`), where XLA would transpose it into a second matrix."""

    def moved(f):
        if not relayout.available():
            return jnp.tril(f)
        return relayout.relayout(jnp.swapaxes(f, -1, -2), relayout.LOWER_OF_TRANSPOSE)  # row-major: the same bytes

    return lax.platform_dependent(factor, cuda=moved, default=jnp.tril)


def _lu_inverse(lu, perm):
    """``A^-1 = U^-1 L^-1 P`` from the packed factor ``lu`` (..., n, n) and the row order ``perm``
    (P batched like the factor under ``jax.vmap``: :func:`~.algebra.permutation_matrix`)."""
    p = permutation_matrix(perm, lu.dtype)
    return solve_triangular(lu, solve_triangular(lu, p, lower=True, unit_diagonal=True), lower=False)


class QR(_Local):
    """The reduced A = Q R (M >= N); the state is (Q, R)."""

    def factor(self, a):
        q, r = householder_qr(a)
        return QRState(q, r), _status.finite_diagonal(jnp.diagonal(r, axis1=-2, axis2=-1))

    def q(self, state):
        return state.factor

    def r(self, state):
        return state.aux

    def diagonal(self, state):
        return jnp.diagonal(state.aux, axis1=-2, axis2=-1)

    def solve(self, state, b, spec=None):
        x = solve_triangular(state.aux, matmul(adjoint(state.factor), _as_matrix(b)), lower=False)
        return _like_rhs(x, b)

    def normal_solve(self, state, y, spec=None):
        """z = (A^H A)^-1 y = R^-1 R^-H y."""
        z = solve_triangular(state.aux, _as_matrix(y), lower=False, trans="C")
        return _like_rhs(solve_triangular(state.aux, z, lower=False), y)

    def minimum_norm(self, state, b, spec=None):
        """The x of least norm with A^H x = b: x = Q R^-H b."""
        y = solve_triangular(state.aux, _as_matrix(b), lower=False, trans="C")
        return _like_rhs(matmul(state.factor, y), b)


class Decompositions(_Local):
    """Eigen-, singular value and polar decompositions. Every Hermitian eigenproblem (syevd, sygvd
    after its Cholesky reduction, H's inside the SVD and polar compositions) is solved by the
    solver that ``jaxmg.kernels.two_stage.TWO_STAGE_ABOVE`` names for the platform compiled for:
    the two-stage solver above its order, else the platform's own syevd."""

    def syevd(self, a):
        return _syevd(a)

    def sygvd(self, a, b):
        """A v = w B v, v^H B v = I, through B = L L^H: the eigenproblem of L^-1 A L^-H."""
        state, status = Cholesky(self.plan).factor(b)
        chol = _factor(state.factor)
        c = solve_triangular(chol, two_stage.hermitian_from_lower(a), lower=True)
        c = solve_triangular(chol, adjoint(c), lower=True)
        w, v = two_stage.device_eigh(c, symmetrize_input=True)
        v = solve_triangular(chol, v, lower=True, trans="C")
        return w, v, _status.either(status, _status.finite(w))

    def gesvd(self, a, full_matrices: bool, compute_uv: bool = True):
        """(u, s, vh, status); u, vh None without ``compute_uv``. Above the order of
        ``jaxmg.kernels.qdwh.POLAR_EIGH_ABOVE`` for the platform compiled for, by QDWH polar + eigh
        (:mod:`.qdwh`), else by the platform's own SVD."""
        if not compute_uv:
            return _by_platform(a, _svdvals_polar_eigh, _svdvals_own)
        return _by_platform(
            a,
            functools.partial(_gesvd_polar_eigh, full_matrices=full_matrices),
            functools.partial(_gesvd_own, full_matrices=full_matrices),
        )

    def polar(self, a, eigen: bool = False):
        """(u_p, h, status), M >= N: by QDWH (:mod:`.qdwh`) where ``gesvd`` takes QDWH polar +
        eigh, else from the platform's own SVD a = U S V^H: U_p = U V^H, H = V S V^H. ``eigen``:
        (u_p, h, sig, vv, status) with ``h = vv diag(sig) vv^H``, the SVD's S and V where it was
        computed, else one eigendecomposition of h (QDWH computes none)."""
        own = functools.partial(_polar_own, eigen=eigen)
        if a.shape[-2] < a.shape[-1]:  # wide (the per-shard kernels take any shape)
            return own(a)
        return _by_platform(a, functools.partial(qdwh.polar_local, eigh=two_stage.device_eigh, eigen=eigen), own)


#: The local backend (``jaxmg.kernels.families.Backend``): the local and batch routes' kernels.
BACKEND = Backend("local", cholesky=Cholesky, lu=LU, qr=QR, decompositions=Decompositions)


def _by_platform(a, polar_eigh, own) -> Any:
    """``polar_eigh(a)`` on the platforms where ``jaxmg.kernels.qdwh.polar_eigh`` says so for a's shape,
    ``own(a)`` on the others (decided when compiled for the platform, so it holds under vmap)."""
    return by_platform(a, lambda p: polar_eigh if qdwh.polar_eigh(p, a.shape) else own)


def _syevd(a):
    """(w, v, status) of the Hermitian matrix of a's lower triangle (``two_stage.device_eigh``)."""
    w, v = two_stage.device_eigh(a)
    return w, v, _status.finite(w)


def _platform_svd(a, **options):
    """``jnp.linalg.svd(a, **options)``, NaN for a matrix with an entry that is not finite, which
    the platform's SVD is not given: LAPACK's gesdd does not return on a matrix with an infinity
    (``jnp.linalg.svd`` hangs there on CPUs), so such a matrix is replaced by zeros and its
    factors by NaN (their status then flags them)."""
    finite = jnp.all(jnp.isfinite(a), axis=(-2, -1))
    factors = jnp.linalg.svd(jnp.where(finite[..., None, None], a, jnp.zeros_like(a)), **options)

    def flagged(x):
        return jnp.where(finite.reshape(finite.shape + (1,) * (x.ndim - finite.ndim)), x, jnp.full_like(x, jnp.nan))

    return jax.tree.map(flagged, factors)


def _gesvd_own(a, full_matrices: bool):
    u, s, vh = _platform_svd(a, full_matrices=full_matrices)
    return u, s, vh, _status.finite(s)


def _svdvals_own(a):
    s = _platform_svd(a, compute_uv=False)
    return None, s, None, _status.finite(s)


def _polar_own(a, eigen: bool = False):
    """``Decompositions.polar`` from the platform's SVD (its s and V are h's eigendecomposition)."""
    u, s, vh = _platform_svd(a, full_matrices=False)
    u_p = matmul(u, vh)
    h = matmul(adjoint(vh) * s.astype(vh.dtype)[..., None, :], vh)
    factors = (s, adjoint(vh)) if eigen else ()
    return u_p, (h + adjoint(h)) / 2, *factors, _status.finite(s)


def _eigh_whole(h, grid):
    return _syevd(h)


def _gesvd_polar_eigh(a, full_matrices: bool):
    if a.shape[-2] < a.shape[-1]:  # wide: a^H = u s vh, so a = vh^H s u^H
        u, s, vh, status = _gesvd_polar_eigh(adjoint(a), full_matrices)
        return adjoint(vh), s, adjoint(u), status
    return qdwh.gesvd(a, grid=qdwh.WHOLE, full_matrices=full_matrices, syevd=_eigh_whole, local=True)


def _svdvals_polar_eigh(a):
    eigvalsh = functools.partial(two_stage.device_eigvalsh, symmetrize_input=True)
    s, status = qdwh.svdvals_local(a if a.shape[-2] >= a.shape[-1] else adjoint(a), eigvalsh=eigvalsh)
    return None, s, None, status
