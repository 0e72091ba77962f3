"""The numerics that make jaxmg.numpy.linalg and jaxmg.scipy.linalg drop-ins for JAX's: empty
matrices, singular determinants and their derivatives, cho_solve from JAX's array factor, JAX's
strict dtype and rank promotion, pinv's derivative of a wide matrix, and det eagerly as in jit.

Small matrices; each check compares with JAX (or with the exact answer)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import lineax as lx
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.lineax
import jaxmg.numpy.linalg as mla
import jaxmg.scipy.linalg as msla
from helpers import eps, make_mesh, put, random_matrix, scaled, spd_matrix

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
#: JAX's own tests' dtypes (float32, complex64) in the quick run; float64 and complex128 in the slow one.
DTYPES_DOUBLE_SLOW = [
    d if d in (np.float32, np.complex64) else pytest.param(d, marks=pytest.mark.slow, id=np.dtype(d).name)
    for d in DTYPES
]


def _same(got, want):
    """The same pytree structure, shapes, dtypes and values (NaN where JAX has NaN)."""
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


# --- 1. Empty matrices ---------------------------------------------------------------------------

# (name, jaxmg call, JAX call) on an empty a (and b with a's rows)
EMPTY = {
    "det": (mla.det, jnp.linalg.det),
    "slogdet": (lambda a: tuple(mla.slogdet(a)), lambda a: tuple(jnp.linalg.slogdet(a))),
    "inv": (mla.inv, jnp.linalg.inv),
    "solve": (
        lambda a: mla.solve(a, jnp.ones((a.shape[-1], 2), a.dtype)),
        lambda a: jnp.linalg.solve(a, jnp.ones((a.shape[-1], 2), a.dtype)),
    ),
    "cholesky": (mla.cholesky, jnp.linalg.cholesky),
    "eigh": (lambda a: tuple(mla.eigh(a)), lambda a: tuple(jnp.linalg.eigh(a))),
    "svd": (lambda a: tuple(mla.svd(a)), lambda a: tuple(jnp.linalg.svd(a))),
    "qr": (lambda a: tuple(mla.qr(a, mode="complete")), lambda a: tuple(jnp.linalg.qr(a, mode="complete"))),
    "pinv": (mla.pinv, jnp.linalg.pinv),
    "norm2": (lambda a: mla.matrix_norm(a, ord=2), lambda a: jnp.linalg.matrix_norm(a, ord=2)),
    "nuc": (lambda a: mla.matrix_norm(a, ord="nuc"), lambda a: jnp.linalg.matrix_norm(a, ord="nuc")),
    "cho_solve": (
        lambda a: msla.cho_solve(msla.cho_factor(a), jnp.ones((0, 1), a.dtype)),
        lambda a: jsl.cho_solve(jsl.cho_factor(a), jnp.ones((0, 1), a.dtype)),
    ),
    "sla.solve_pos": (
        lambda a: msla.solve(a, jnp.ones(0, a.dtype), assume_a="pos"),
        lambda a: jsl.solve(a, jnp.ones(0, a.dtype), assume_a="pos"),
    ),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_matrices_give_jax_answers(name):
    ours, theirs = EMPTY[name]
    a = jnp.zeros((0, 0), jnp.float32)
    _same(ours(a), theirs(a))
    if name in ("det", "slogdet", "inv", "svd", "nuc"):  # batched, and in jit
        stack = jnp.zeros((2, 0, 0), jnp.float32)
        _same(jax.jit(ours)(stack), theirs(stack))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_empty_rectangular(shape):
    a, b = jnp.zeros(shape), jnp.ones((shape[0], 2))
    _same(tuple(mla.svd(a, full_matrices=False)), tuple(jnp.linalg.svd(a, full_matrices=False)))
    _same(tuple(mla.qr(a, mode="complete")), tuple(jnp.linalg.qr(a, mode="complete")))
    _same(mla.pinv(a), jnp.linalg.pinv(a))
    _same(mla.lstsq(a, b), jnp.linalg.lstsq(a, b))
    _same(mla.matrix_norm(a, ord=2), jnp.linalg.matrix_norm(a, ord=2))


# derivatives on empty matrices, alone and stacked (JAX's testCholesky takes a (1000, 0, 0) stack)
EMPTY_DERIVATIVES = {
    "cholesky": mla.cholesky,
    "eigvalsh": mla.eigvalsh,
    "eigh": lambda a: mla.eigh(a)[1],
    "svdvals": mla.svdvals,
    "det": mla.det,
    "inv": mla.inv,
}


def _empty_det(a):
    """det of empty matrices, 1, and its derivative tr(adj(a) da), 0 (JAX's own det has no
    derivative there: IndexError)."""
    return jnp.ones(a.shape[:-2], a.dtype) + jnp.sum(a, axis=(-2, -1))


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0)])
@pytest.mark.parametrize("name", sorted(EMPTY_DERIVATIVES))
def test_empty_matrices_derivatives(name, shape):
    """jvp (and for cholesky check_grads to second order, as JAX's testCholesky) of empty matrices:
    tangents of the primal's shape and dtype, as JAX's."""
    fn = EMPTY_DERIVATIVES[name]
    a = jnp.zeros(shape, jnp.complex128)
    value, tangent = jax.jvp(fn, (a,), (a,))
    want_value, want_tangent = jax.jvp(
        {
            "cholesky": jnp.linalg.cholesky,
            "eigvalsh": jnp.linalg.eigvalsh,
            "eigh": lambda a: jnp.linalg.eigh(a)[1],
            "svdvals": jnp.linalg.svdvals,
            "det": _empty_det,
            "inv": jnp.linalg.inv,
        }[name],
        (a,),
        (a,),
    )
    _same((value, tangent), (want_value, want_tangent))
    if name == "cholesky":
        check_grads(fn, (a,), 2)


def test_empty_functional_api_and_modules():
    """jaxmg's own functions and modules answer as JAX does on empty matrices, not with an error."""
    a, b = jnp.zeros((0, 0)), jnp.zeros((0, 2))
    assert jaxmg.potrs(a, b).shape == (0, 2)
    x, logdet, status = jaxmg.potrs(a, b, return_logdet=True, return_status=True)
    assert float(logdet) == 0.0 and int(status) == 0
    assert jaxmg.lu_solve(a, b).shape == (0, 2)
    assert jaxmg.lu_solve(a, b, backend="native").shape == (0, 2)  # nothing to distribute: local
    assert jaxmg.cholesky(a).shape == (0, 0)
    w, v = jaxmg.syevd(a)
    assert w.shape == (0,) and v.shape == (0, 0)
    assert [x.shape for x in jaxmg.gesvd(jnp.zeros((3, 0)))] == [(3, 0), (0,), (0, 0)]
    assert [x.shape for x in jaxmg.qr(jnp.zeros((3, 0)))] == [(3, 0), (0, 0)]
    sign, logabsdet = jaxmg.LU(a).slogdet()
    assert (float(sign), float(logabsdet)) == (1.0, 0.0)
    assert float(jaxmg.Cholesky(a).logdet()) == 0.0
    assert jax.vmap(jaxmg.potrs)(jnp.zeros((2, 0, 0)), jnp.zeros((2, 0, 1))).shape == (2, 0, 1)
    np.testing.assert_array_equal(jax.grad(mla.det)(a), np.zeros((0, 0)))


# --- 2. Singular determinants --------------------------------------------------------------------

CORANK1 = np.array([[50, -30, 45], [-30, 90, -81], [45, -81, 81]], np.float32)  # rank 2
CORANK2 = np.array([[36, -42, 18], [-42, 49, -21], [18, -21, 9]], np.float32)  # rank 1


def _adjugate(a):
    """The adjugate from cofactors, in float64."""
    a = np.asarray(a, np.float64)
    n = a.shape[0]
    cof = np.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, i, 0), j, 1)
            cof[i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return cof.T


def test_det_of_singular_matrices_is_a_number():
    nearly = jnp.array([[-1.0, 1.5], [2.0 / 3.0, -1.0]], jnp.float32)
    assert abs(float(mla.det(nearly))) <= 1e-6 and abs(float(msla.det(nearly))) <= 1e-6
    exact = jnp.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    assert float(mla.det(exact)) == 0.0
    sign, logabsdet = mla.slogdet(exact)
    assert float(sign) == 0.0 and float(logabsdet) == -np.inf
    stacked = mla.det(jnp.stack([exact, jnp.eye(3), jnp.zeros((3, 3))]))
    np.testing.assert_array_equal(stacked, [0.0, 1.0, 0.0])
    sign, logabsdet = mla.slogdet(jnp.zeros((4, 4), jnp.complex64))
    assert complex(sign) == 0 and float(logabsdet) == -np.inf


def test_lu_module_slogdet_of_singular_matrices_is_jaxs_with_the_status():
    # The module's slogdet is (0, -inf) where a is singular, as jnp.linalg.slogdet, and its
    # status flags the matrix, alone and in a stack made under vmap and read outside it.
    exact = jnp.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    lu = jaxmg.LU(exact)
    sign, logabsdet = lu.slogdet()
    assert (float(sign), float(logabsdet), int(lu.status) != 0) == (0.0, -np.inf, True)
    stack = jax.vmap(jaxmg.LU)(jnp.stack([exact, 2 * jnp.eye(3)]))
    sign, logabsdet = stack.slogdet()
    np.testing.assert_array_equal(sign, [0.0, 1.0])
    np.testing.assert_allclose(logabsdet, [-np.inf, 3 * np.log(2.0)])
    assert [int(s) != 0 for s in stack.status] == [True, False]


def test_det_derivative_at_singular_matrices():
    np.testing.assert_array_equal(jax.grad(mla.det)(jnp.zeros((1, 1), jnp.float32)), [[1.0]])
    g = jax.grad(mla.det)(jnp.asarray(CORANK1))
    np.testing.assert_allclose(g, _adjugate(CORANK1).T, rtol=1e-4)  # d det / d a = adj(a)^T
    np.testing.assert_array_equal(jax.grad(mla.det)(jnp.asarray(CORANK2)), np.zeros((3, 3)))
    np.testing.assert_array_equal(jax.grad(mla.det)(jnp.zeros((4, 4))), np.zeros((4, 4)))
    check_grads(mla.det, (jnp.asarray(CORANK1),), 1, atol=1e-1, rtol=1e-1)
    check_grads(mla.det, (jnp.asarray(CORANK2),), 1, atol=1e-1, rtol=1e-1, eps=1e-1)
    f = lambda x: mla.det(x).sum()  # noqa: E731
    check_grads(f, (jnp.ones((4, 1, 1)),), 2, atol=1e-1, rtol=1e-1)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_det_derivatives_second_order_and_batched(dtype):
    rng = np.random.default_rng(0)
    a = jnp.asarray(random_matrix(rng, (2, 5, 5), dtype))
    check_grads(mla.det, (a,), 2, modes=("fwd", "rev"))
    check_grads(lambda a: mla.slogdet(a)[1], (a[0],), 2, modes=("fwd", "rev"))
    want = jax.grad(lambda a: jnp.real(jnp.sum(jnp.linalg.det(a))))(a)
    got = jax.grad(lambda a: jnp.real(jnp.sum(mla.det(a))))(a)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
def test_det_on_a_mesh(kind):
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=kind)
    a = np.array(CORANK1, np.float64)
    big = np.zeros((8, 8))
    big[:3, :3], big[3:, 3:] = a, np.eye(5)  # rank 7: det 0, adjugate from the corank-1 block
    placed = put(big, mesh, P("x", "y"))
    with jax.set_mesh(mesh):
        assert float(mla.det(placed)) == pytest.approx(0.0, abs=1e-9)
        g = jax.jit(jax.grad(mla.det))(placed)
    np.testing.assert_allclose(np.asarray(g), _adjugate(big).T, rtol=1e-6, atol=1e-6)


_EAGER_AS_JIT = """
import jax, jax.numpy as jnp, numpy as np
import jaxmg.numpy.linalg as la
jitted = jax.jit(la.det)
for seed in range(30):
    a = jnp.asarray((3 * np.random.default_rng(seed).standard_normal((25, 25))).astype(np.float32))
    assert np.asarray(la.det(a)) == np.asarray(jitted(a)), seed
stack = jnp.asarray(np.random.default_rng(99).standard_normal((3, 25, 25)).astype(np.float32))
np.testing.assert_array_equal(la.det(stack), jitted(stack))
"""


def test_det_eagerly_as_in_jit():
    """det runs one computation: eagerly and in jax.jit the numbers are identical (float32,
    25 x 25). In a fresh process with XLA's default optimisation (this suite compiles at a
    lower level, under which separately compiled steps round alike)."""
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if "optimization_level" not in f and "expensive_passes" not in f and "device_count" not in f
    ]
    env = dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _EAGER_AS_JIT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


# --- 3. cho_solve with JAX's array factor ---------------------------------------------------------


def _equations(fn, *args):
    """Every equation of fn's jaxpr, those of its sub-jaxprs (jit, custom rules) included."""

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield eqn
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(sub, "jaxpr", None)
                    if inner is not None:
                        yield from walk(inner if hasattr(inner, "eqns") else inner.jaxpr)

    return list(walk(jax.make_jaxpr(fn)(*args).jaxpr))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_cho_solve_array_factor_solves_with_that_factor(lower, dtype):
    """Two triangular solves with the factor: the error grows like cond(L), as JAX's, not like
    cond(L)^2 (a refactorisation of L L^H); nothing is factored again."""
    n = 16
    rng = np.random.default_rng(7)
    cplx = np.issubdtype(dtype, np.complexfloating)
    lower_factor = np.tril(random_matrix(rng, (n, n), np.complex128 if cplx else np.float64), -1) / 20
    lower_factor = lower_factor + np.diag(np.geomspace(1.0, 1e-2, n))  # graded: cond(L) 6e3 to 2e4
    factor = lower_factor if lower else lower_factor.conj().T
    a = factor @ factor.conj().T if lower else factor.conj().T @ factor
    b = random_matrix(np.random.default_rng(1), (3, n, 2), np.float64).astype(a.dtype)
    exact = np.linalg.solve(a, b)
    c = jnp.asarray(factor.astype(dtype))
    got = msla.cho_solve((c, lower), jnp.asarray(b.astype(dtype)))
    want = jsl.cho_solve((c, lower), jnp.asarray(b.astype(dtype)))
    error = np.max(np.abs(np.asarray(got) - exact)) / np.max(np.abs(exact))
    jax_error = np.max(np.abs(np.asarray(want) - exact)) / np.max(np.abs(exact))
    assert error <= 4 * jax_error + 10 * eps(dtype), (error, jax_error)
    equations = _equations(lambda c, b: msla.cho_solve((c, lower), b), c, jnp.ones((n, 2), dtype))
    assert any(eqn.primitive.name == "triangular_solve" for eqn in equations)
    assert not any("potrf" in str(eqn.params) or eqn.primitive.name == "cholesky" for eqn in equations)


@pytest.mark.parametrize("lower", [True, False])
def test_cho_solve_array_factor_derivatives(lower):
    rng = np.random.default_rng(2)
    a = spd_matrix(rng, 6, np.complex128)
    c = jnp.asarray(np.linalg.cholesky(a) if lower else np.linalg.cholesky(a).conj().T)
    b = jnp.asarray(random_matrix(rng, (2, 6, 1), np.complex128))
    f = lambda c, b: msla.cho_solve((c, lower), b)  # noqa: E731
    check_grads(f, (c, b[0, :, 0]), 2, modes=("fwd", "rev"))
    check_grads(f, (jnp.stack([c, 2 * c]), b), 1, modes=("fwd", "rev"))  # batched factor and b


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto])
def test_cho_solve_array_factor_on_a_mesh(kind):
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=kind)
    rng = np.random.default_rng(3)
    a = spd_matrix(rng, 16, np.float64)
    c = put(np.linalg.cholesky(a), mesh, P("x", "y"))
    b = put(np.ones((16, 2)), mesh, P("x"))
    want = np.linalg.solve(a, np.ones((16, 2)))
    with jax.set_mesh(mesh):
        x = msla.cho_solve((c, True), b)
        xj = jax.jit(lambda c, b: msla.cho_solve((c, True), b))(c, b)
        g = jax.grad(lambda c: jnp.sum(msla.cho_solve((c, True), b)))(c)
    for out in (x, xj):
        assert scaled(np.max(np.abs(np.asarray(out) - want)), np.max(np.abs(want)), 16, np.float64) <= 30 * 16
    ref = jax.grad(lambda c: jnp.sum(jsl.cho_solve((c, True), jnp.ones((16, 2)))))(jnp.asarray(np.linalg.cholesky(a)))
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-8, atol=1e-10)


# --- 4. JAX's strict dtype promotion and rank promotion ------------------------------------------


@pytest.fixture
def strict_promotion():
    """JAX's own test configuration: no implicit dtype promotion, no implicit rank promotion."""
    with jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"):
        yield


def _ones(a, *shape):
    return jnp.ones(shape or (a.shape[-1],), a.dtype)


STRICT = {
    "solve": lambda a: mla.solve(a, _ones(a, 6, 2)),
    "det": mla.det,
    "slogdet": lambda a: mla.slogdet(a)[1] + jnp.real(mla.slogdet(a)[0]),
    "inv": mla.inv,
    "cholesky": mla.cholesky,
    "eigh": lambda a: jnp.abs(mla.eigh(a)[1][0]) + mla.eigh(a)[0],
    "svd_hermitian": lambda a: jnp.abs(mla.svd(a, hermitian=True)[0]),
    "pinv": mla.pinv,
    "pinv_wide": lambda a: mla.pinv(a[:3]),
    "lstsq": lambda a: mla.lstsq(a, _ones(a))[0],
    "sla.solve_pos": lambda a: msla.solve(a, _ones(a), assume_a="pos"),
    "sla.cho_solve": lambda a: msla.cho_solve(msla.cho_factor(a), _ones(a)),
    "sla.cho_solve_array": lambda a: msla.cho_solve((jnp.linalg.cholesky(a), True), _ones(a)),
    "sla.polar": lambda a: msla.polar(a)[1],
    "potrs_logdet": lambda a: jaxmg.potrs(a, _ones(a), return_logdet=True)[1],
    "lineax_cholesky": lambda a: (
        lx.linear_solve(
            lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag), _ones(a), jaxmg.lineax.Cholesky()
        ).value
    ),
}


@pytest.mark.parametrize("dtype", DTYPES_DOUBLE_SLOW)
@pytest.mark.parametrize("name", sorted(STRICT))
def test_strict_promotion(strict_promotion, name, dtype):
    """Values and reverse-mode derivatives under jax_numpy_dtype_promotion='strict' and
    jax_numpy_rank_promotion='raise' (JAX's and Lineax's test configuration)."""
    a = jnp.asarray(spd_matrix(np.random.default_rng(4), 6, dtype))
    fn = STRICT[name]
    value = fn(a)
    assert np.all(np.isfinite(np.asarray(value)))
    grad = jax.grad(lambda a: jnp.real(jnp.sum(fn(a))))(a)
    assert grad.dtype == a.dtype and np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_strict_promotion_above_the_polar_eigh_order(strict_promotion, dtype):
    """SVDs and polar factors of matrices above POLAR_EIGH_ABOVE's order for GPUs (32), whose
    QDWH branch is traced on every platform (on GPUs it runs; float32 iterates in float64 where
    x64 is on), under JAX's strict dtype and rank promotion: values and derivatives."""
    a = jnp.asarray(random_matrix(np.random.default_rng(11), (40, 36), dtype))
    u, s, vh = mla.svd(a, full_matrices=False)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(np.asarray(a), compute_uv=False), rtol=1e-4)
    assert int(mla.matrix_rank(a)) == 36 and msla.polar(a)[0].shape == (40, 36)
    grad = jax.grad(lambda a: jnp.sum(mla.svdvals(a)) + jnp.real(jnp.sum(msla.polar(a)[1])))(a)
    assert grad.dtype == a.dtype and np.all(np.isfinite(np.asarray(grad)))


# --- 5. pinv's derivative of a wide matrix --------------------------------------------------------


def _largest_intermediate(fn, *args) -> int:
    return max(
        int(np.prod(v.aval.shape)) for eqn in _equations(fn, *args) for v in eqn.outvars if hasattr(v.aval, "shape")
    )


@pytest.mark.parametrize("shape", [(2, 4000), (4000, 2)])
def test_pinv_derivative_multiplies_in_the_small_order(shape):
    """No intermediate of the derivative of a 2 x 4000 (or 4000 x 2) pinv is 4000 x 4000."""
    a = jnp.ones(shape, jnp.float32)
    jvp = lambda a, t: jax.jvp(mla.pinv, (a,), (t,))  # noqa: E731
    grad = jax.grad(lambda a: jnp.sum(mla.pinv(a)))
    assert _largest_intermediate(jvp, a, a) < 4000 * 100
    assert _largest_intermediate(grad, a) < 4000 * 100


def test_pinv_derivative_of_a_wide_matrix_is_jax():
    a = jnp.asarray(random_matrix(np.random.default_rng(5), (3, 7), np.float64))
    check_grads(mla.pinv, (a,), 1, modes=("fwd", "rev"))
    t = jnp.asarray(random_matrix(np.random.default_rng(6), (3, 7), np.float64))
    np.testing.assert_allclose(
        jax.jvp(mla.pinv, (a,), (t,))[1], jax.jvp(jnp.linalg.pinv, (a,), (t,))[1], rtol=1e-9, atol=1e-9
    )


# --- 6. Arguments converted as JAX converts them --------------------------------------------------


def _own_solve(name: str, a, b):
    """jaxmg's function ``name`` (potrs, lu_solve, least_squares), or its module's solve."""
    if name in ("Cholesky", "LU"):
        return getattr(jaxmg, name)(a).solve(b)
    return getattr(jaxmg, name)(a, b)


@pytest.mark.parametrize("numpy_args", ["a and b", "a", "b"])
@pytest.mark.parametrize("name", ["potrs", "lu_solve", "least_squares", "Cholesky", "LU"])
def test_numpy_arguments_eagerly_as_in_jit_without_x64(name, numpy_args):
    """jaxmg's own solvers on NumPy arguments (a 4 x 4 SPD matrix): eagerly they see the dtypes
    that jax.jit gives them (float32 where x64 is off)."""
    fn = functools.partial(_own_solve, name)
    a_host = np.diag([4.0, 3.0, 2.0, 1.0]) + 0.5
    b_host = np.arange(1.0, 5.0)
    want = np.linalg.solve(a_host, b_host)
    with jax.enable_x64(False):
        a = a_host if "a" in numpy_args else jnp.asarray(a_host)
        b = b_host if "b" in numpy_args.split(" ") else jnp.asarray(b_host)
        eager, jitted = fn(a, b), jax.jit(fn)(a, b)
    for x in (eager, jitted):
        assert x.dtype == np.float32 and x.shape == (4,)
        assert scaled(np.max(np.abs(np.asarray(x) - want)), np.max(np.abs(want)), 4, np.float32) <= 30 * 4


def test_dtype_errors_without_x64_name_a_fix_that_works():
    """A real mismatch names b and the conversion; an unsupported dtype offers only the dtypes that
    the current x64 mode has."""
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match=r"b has dtype float32 but a has dtype complex64.*b\.astype\(a\.dtype\)"):
            jaxmg.potrs(np.eye(3, dtype=np.complex64), np.ones(3))
        with pytest.raises(
            TypeError, match=r"argument a\); convert it with a\.astype\(jnp\.float32\) \(or complex64\)\.$"
        ):
            jaxmg.potrs(np.eye(3, dtype=np.float16), np.ones(3, np.float16))


def _x64_calls(a, b, tall):
    """Every kind of entry point (functional, modules, numpy and scipy drop-ins) on a's matrix."""
    return {
        "potrs": lambda: jaxmg.potrs(a, b),
        "lu_solve": lambda: jaxmg.lu_solve(a, b),
        "least_squares": lambda: jaxmg.least_squares(tall, b),
        "cholesky": lambda: jaxmg.cholesky(a),
        "Cholesky": lambda: jaxmg.Cholesky(a).solve(b),
        "LU": lambda: jaxmg.LU(a).solve(b),
        "QR": lambda: jaxmg.QR(tall).solve(b),
        "numpy.solve": lambda: mla.solve(a, b),
        "numpy.inv": lambda: mla.inv(a),
        "numpy.eigh": lambda: mla.eigh(a),
        "numpy.lstsq": lambda: mla.lstsq(tall, b),
        "scipy.cho_factor": lambda: jaxmg.scipy.linalg.cho_factor(a),
        "scipy.lu_factor": lambda: jaxmg.scipy.linalg.lu_factor(a),
        "scipy.solve": lambda: jaxmg.scipy.linalg.solve(a, b),
    }


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("name", list(_x64_calls(None, None, None)))
def test_64_bit_arrays_without_x64_are_refused_by_name(name, dtype):
    """float64 and complex128 arrays made in 64-bit mode and passed inside jax.enable_x64(False):
    JAX's functions keep their dtype, which jaxmg cannot, so every entry point raises a TypeError
    that names the argument and both fixes (potrs crashed in a platform switch; the drop-ins
    returned float32 unasked); converted as the message says, they are solved in 32 bits."""
    with jax.enable_x64(True):
        a = jnp.asarray(np.diag([4.0, 3.0, 2.0, 1.0]) + 0.5, dtype)
        b = jnp.arange(1.0, 5.0, dtype=dtype)
    single = "float32" if dtype == np.float64 else "complex64"
    with jax.enable_x64(False):
        with pytest.raises(
            TypeError, match=rf"^a has dtype {np.dtype(dtype)}, .*a\.astype\(jnp\.{single}\).*enable_x64"
        ):
            _x64_calls(a, b, a)[name]()
        a32, b32 = a.astype(single), b.astype(single)
        result = _x64_calls(a32, b32, a32)[name]()
    dtypes = {np.dtype(x.dtype) for x in jax.tree.leaves(result) if hasattr(x, "dtype")}
    assert dtypes & {np.dtype(np.float32), np.dtype(np.complex64)} and not dtypes & {
        np.dtype(np.float64),
        np.dtype(np.complex128),
    }
    if name in ("potrs", "lu_solve", "least_squares", "Cholesky", "LU", "QR", "numpy.solve", "scipy.solve"):
        want = np.linalg.solve(np.asarray(a), np.asarray(b))
        assert scaled(np.max(np.abs(np.asarray(result) - want)), np.max(np.abs(want)), 4, np.float32) <= 30 * 4


# (factor dtype, b dtype): JAX promotes the factor and b together (promote_dtypes_inexact)
PROMOTED = [
    (np.complex128, np.float64),
    (np.float64, np.complex128),
    (np.float32, np.float64),
    (np.float32, np.complex64),
    (np.complex64, np.float64),
    (np.float64, np.int32),
    (np.float32, np.bool_),
]


@pytest.mark.parametrize(("a_dtype", "b_dtype"), PROMOTED)
def test_factor_solves_promote_b_as_jax(a_dtype, b_dtype):
    """cho_solve with jaxmg's Cholesky factor, lu_solve with jaxmg.LU and with JAX's packed factor:
    the result dtype and values of jax.scipy.linalg's."""
    a = jnp.asarray(spd_matrix(np.random.default_rng(8), 5, np.float64).astype(a_dtype))
    b = jnp.asarray((np.arange(5) % 2 + (1j * np.arange(5) if np.dtype(b_dtype).kind == "c" else 0)).astype(b_dtype))
    cases = (
        (msla.cho_solve(msla.cho_factor(a), b), jsl.cho_solve(jsl.cho_factor(a), b)),
        (msla.lu_solve((jaxmg.LU(a), None), b), jsl.lu_solve(jsl.lu_factor(a), b)),
        (msla.lu_solve(msla.lu_factor(a), b), jsl.lu_solve(jsl.lu_factor(a), b)),
    )
    for got, want in cases:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(want), rtol=20 * eps(want.dtype), atol=20 * eps(want.dtype)
        )


FACTOR_SOLVES = {
    "cho_solve": lambda a, b: msla.cho_solve(msla.cho_factor(a), b),
    "lu_solve": lambda a, b: msla.lu_solve((jaxmg.LU(a), None), b, trans=1),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FACTOR_SOLVES))
def test_factor_solve_of_a_complex_b_with_a_real_factor_derivatives(name):
    """The promoted solve's derivatives in a and b (a real factor, a complex b), under jax.jit too."""
    fn = FACTOR_SOLVES[name]
    a = jnp.asarray(spd_matrix(np.random.default_rng(9), 4, np.float64))
    b = jnp.asarray(random_matrix(np.random.default_rng(10), (4,), np.complex128))
    check_grads(lambda b: fn(a, b), (b,), 2, modes=("fwd", "rev"))
    check_grads(lambda a: jnp.real(fn(a, b)) + jnp.imag(fn(a, b)), (a,), 1, modes=("fwd", "rev"))
    want = jsl.cho_solve(jsl.cho_factor(a), b) if name == "cho_solve" else jsl.lu_solve(jsl.lu_factor(a), b, trans=1)
    np.testing.assert_allclose(np.asarray(jax.jit(fn)(a, b)), np.asarray(want), rtol=1e-12)


def _ints(dtype, n=3):
    """A nonsingular, symmetric positive-definite matrix of integers (the identity for bool) and
    a vector, of ``dtype``."""
    if dtype == np.bool_:
        return np.eye(n, dtype=bool), np.ones(n, bool)
    return (np.eye(n, dtype=int) * 4 + 1).astype(dtype), np.arange(1, n + 1).astype(dtype)


# every function of jaxmg.numpy.linalg and jaxmg.scipy.linalg that promotes, with JAX's own
PROMOTING = {
    "solve": (lambda m, a, b: m.solve(a, b), mla, jnp.linalg),
    "inv": (lambda m, a, b: m.inv(a), mla, jnp.linalg),
    "det": (lambda m, a, b: m.det(a), mla, jnp.linalg),
    "slogdet": (lambda m, a, b: tuple(m.slogdet(a)), mla, jnp.linalg),
    "cholesky": (lambda m, a, b: m.cholesky(a), mla, jnp.linalg),
    "eigh": (lambda m, a, b: tuple(m.eigh(a)), mla, jnp.linalg),
    "svd": (lambda m, a, b: tuple(m.svd(a)), mla, jnp.linalg),
    "qr": (lambda m, a, b: tuple(m.qr(a)), mla, jnp.linalg),
    "lstsq": (lambda m, a, b: m.lstsq(a, b), mla, jnp.linalg),
    "pinv": (lambda m, a, b: m.pinv(a), mla, jnp.linalg),
    "matrix_rank": (lambda m, a, b: m.matrix_rank(a), mla, jnp.linalg),
    "cond": (lambda m, a, b: m.cond(a), mla, jnp.linalg),
    "norm": (lambda m, a, b: m.norm(a, 2), mla, jnp.linalg),
    "tensorsolve": (lambda m, a, b: m.tensorsolve(a, b), mla, jnp.linalg),
    "sla.cho_solve": (lambda m, a, b: m.cho_solve(m.cho_factor(a), b), msla, jsl),
    "sla.lu_factor": (lambda m, a, b: m.lu_factor(a), msla, jsl),
    "sla.lu_solve": (lambda m, a, b: m.lu_solve(m.lu_factor(a), b), msla, jsl),
    "sla.lu": (lambda m, a, b: m.lu(a), msla, jsl),
    "sla.solve": (lambda m, a, b: m.solve(a, b, assume_a="pos"), msla, jsl),
    "sla.solve_triangular": (lambda m, a, b: m.solve_triangular(a, b, lower=True), msla, jsl),
    "sla.eigh": (lambda m, a, b: m.eigh(a), msla, jsl),
    "sla.svd": (lambda m, a, b: m.svd(a), msla, jsl),
}


def _dtypes(tree):
    return [np.dtype(x.dtype) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("x64", [True, False])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.uint8])
def test_integer_and_bool_arguments_promote_as_jax(dtype, x64):
    """The result dtypes of JAX's functions on integer and boolean arguments (float32 for all but
    64-bit integers with x64 on), traced for every function and eagerly for solve, inv and det."""
    a, b = _ints(dtype)
    with jax.enable_x64(x64):
        for name, (call, ours, theirs) in PROMOTING.items():
            got = jax.eval_shape(functools.partial(call, ours), a, b)
            want = jax.eval_shape(functools.partial(call, theirs), a, b)
            assert _dtypes(got) == _dtypes(want), name
        for name in ("solve", "inv", "det"):
            call, ours, theirs = PROMOTING[name]
            _same(call(ours, jnp.asarray(a), jnp.asarray(b)), call(theirs, jnp.asarray(a), jnp.asarray(b)))


def test_weakly_typed_matrices_as_jax():
    """A weakly typed float64 matrix (built from Python floats, ``jnp.where(mask, 5.0, 1.0)``) in
    64-bit mode: every function gives JAX's dtypes, and LU-based ones JAX's values (JAX's own LU
    branch made weak pivots, which 64-bit mode promoted to int64 against LAPACK's int32)."""
    with jax.enable_x64(True):
        weak = jnp.where(jnp.eye(4, dtype=bool), 5.0, 1.0)
        b = jnp.arange(1.0, 5.0)
        assert jax.typeof(weak).weak_type
        for name, (call, ours, theirs) in PROMOTING.items():
            got = jax.eval_shape(functools.partial(call, ours), weak, b)
            assert _dtypes(got) == _dtypes(jax.eval_shape(functools.partial(call, theirs), weak, b)), name
        for name in ("solve", "inv", "det", "slogdet"):
            call, ours, theirs = PROMOTING[name]
            _same(call(ours, weak, b), call(theirs, weak, b))
        np.testing.assert_allclose(jaxmg.LU(weak).solve(b), np.linalg.solve(np.asarray(weak), np.asarray(b)))


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3), (3, 0)])
def test_cond_of_an_empty_matrix_is_an_error_as_in_jax(shape):
    for fn in (jnp.linalg.cond, mla.cond):
        with pytest.raises(ValueError, match="must not be empty"):
            fn(jnp.zeros(shape))


def test_empty_and_rectangular_errors_as_jax():
    """norm, pinv, det, slogdet, inv and solve of (0, 0) matrices and (0, 0, 0) stacks answer as
    JAX's, matrix_rank with JAX's ValueError (no largest singular value for its tolerance);
    matrix_power of a non-square matrix is JAX's TypeError."""
    for shape in ((0, 0), (0, 0, 0)):
        a = jnp.zeros(shape)
        for name in ("norm", "pinv", "det", "slogdet", "inv"):
            _same(getattr(mla, name)(a), getattr(jnp.linalg, name)(a))
        for fn in (jnp.linalg.matrix_rank, mla.matrix_rank):
            with pytest.raises(ValueError):
                fn(a)
        _same(mla.solve(a, jnp.zeros(shape[:-1] + (2,))), jnp.linalg.solve(a, jnp.zeros(shape[:-1] + (2,))))
    for fn in (jnp.linalg.matrix_power, mla.matrix_power):
        with pytest.raises(TypeError, match="square"):
            fn(jnp.zeros((3, 0)), 2)


def test_a_module_made_in_64_bit_mode_is_refused_inside_enable_x64_false():
    """A module made in 64-bit mode and read inside jax.enable_x64(False): every method and
    attribute raises a TypeError that says why and names both fixes (they had failed inside lax
    with a float32/float64 mismatch, or returned float32 unasked), and works again in 64-bit mode."""
    with jax.enable_x64(True):
        a = jnp.asarray(np.diag([4.0, 3.0, 2.0, 1.0]) + 0.5)
        modules = dict(cholesky=jaxmg.Cholesky(a), lu=jaxmg.LU(a), qr=jaxmg.QR(a))
    reads = {
        "cholesky": [lambda m: m.logdet(), lambda m: m.factor, lambda m: m.inverse()],
        "lu": [lambda m: m.slogdet(), lambda m: m.lu, lambda m: m.inverse()],
        "qr": [lambda m: m.q, lambda m: m.r, lambda m: m.rank_status()],
    }
    for name, module in modules.items():
        for read in reads[name]:
            with (
                jax.enable_x64(False),
                pytest.raises(TypeError, match=r"float64 .*enable_x64\(True\).*astype\(jnp\.float32\)"),
            ):
                read(module)
            with jax.enable_x64(True):
                assert all(x.dtype != np.float32 for x in jax.tree.leaves(read(module)) if hasattr(x, "dtype")), name
