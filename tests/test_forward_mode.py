"""Forward mode (and reverse mode by transposition) of the decompositions: qr, least_squares,
syevd, sygvd, gesvd and polar, and the modules QR, Eigh, SVD and Polar.

``jax.test_util.check_grads`` at order 2, forward and reverse, called eagerly as users call it
(no jit), on an Auto-axes and an Explicit-axes mesh, real and complex; inputs make each
operation differentiable (Hermitian, B positive definite, distinct eigen- and singular values,
full rank) and losses do not depend on the eigen-/singular vectors' phases. Then jax.jacfwd,
jax.hessian and jax.jvp on small cases, degenerate eigenvalues, and tangents' layouts.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
from helpers import AXES, lower_read, make_mesh, random_matrix, spd_matrix

N = 8
M = 16
SPEC = P("x", "y")
#: (mesh axis type, dtype) pairs: each operation runs real on Auto axes and complex on
#: Explicit axes (eager order-2 checks compile many programs: the full cross would double it)
COMBOS = [
    pytest.param((AxisType.Auto, np.float64), id="auto-float64"),
    pytest.param((AxisType.Explicit, np.complex128), id="explicit-complex128"),
]


def _entered(axis_type):
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    with jax.set_mesh(mesh):
        yield mesh


@pytest.fixture(params=AXES)
def mesh(request):
    yield from _entered(request.param)


@pytest.fixture(params=COMBOS)
def combo(request):
    axis_type, dtype = request.param
    for mesh in _entered(axis_type):
        yield mesh, dtype


def _put(x, mesh):
    return jax.device_put(x, NamedSharding(mesh, SPEC))


def _whole(x):
    """``x`` replicated, so that a loss may slice and multiply it freely (Explicit axes reject
    slicing and contracting sharded dimensions without an out_sharding)."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    if sharding is None or sharding.mesh.empty or AxisType.Explicit not in sharding.mesh.axis_types:
        return x
    return jax.sharding.reshard(x, NamedSharding(sharding.mesh, P()))


def herm(x):
    """The Hermitian part: derivatives are checked along Hermitian directions. (syevd reads
    the lower triangle: along any direction, its derivatives are those of the functions of
    ``lower_read(a)``, checked in test_jacfwd_and_hessian_match_jax_numpy and
    test_jvp_matches_jax_numpy_and_keeps_layouts.)"""
    return (x + jnp.conj(_whole(x)).T) / 2


def _weights(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


def eig_loss(w, v):
    """Depends on w and on |v|^2 and v diag(c) v^H: invariant to each eigenvector's phase."""
    v = _whole(v)
    c = _weights(v.shape[1], 1)
    return (
        jnp.sum(w * _weights(w.shape, 2))
        + jnp.sum(jnp.abs(v) ** 2 * _weights(v.shape, 3))
        + jnp.real(jnp.sum(((v * c) @ jnp.conj(v).T) * _weights(v.shape, 4)))
    )


def svd_loss(u, s, vh):
    """Depends on s, |u|^2, |vh|^2 and u diag(c) vh: invariant to each pair's common phase."""
    u, vh = _whole(u), _whole(vh)
    c = _weights(s.shape, 5)
    return (
        jnp.sum(s * _weights(s.shape, 6))
        + jnp.sum(jnp.abs(u) ** 2 * _weights(u.shape, 7))
        + jnp.sum(jnp.abs(vh) ** 2 * _weights(vh.shape, 8))
        + jnp.real(jnp.sum(((u * c) @ vh) * _weights(u.shape, 9)))
    )


def svd_full_loss(u, s, vh):
    """u is M x M: its last M - N columns enter through their projector only."""
    u = _whole(u)
    u2 = u[:, N:]
    return svd_loss(u[:, :N], s, vh) + jnp.real(jnp.sum((u2 @ jnp.conj(u2).T) * _weights((M, M), 10)))


def _data(dtype):
    """Hermitian a with distinct eigenvalues, Hermitian positive-definite b, full-rank tall t
    (distinct singular values), and a right-hand side."""
    rng = np.random.default_rng(0)
    a = random_matrix(rng, (N, N), dtype)
    return {
        "a": (a + a.conj().T) / 2,
        "b": spd_matrix(rng, N, dtype) + np.eye(N, dtype=dtype),
        "t": random_matrix(rng, (M, N), dtype),
        "rhs": random_matrix(rng, (M,), dtype),
    }


#: name -> (function of the inputs, names of its inputs)
FUNCTIONS = {
    "qr": (lambda t: jaxmg.qr(t), ("t",)),
    "least_squares": (lambda t, rhs: jaxmg.least_squares(t, rhs), ("t", "rhs")),
    "syevd": (lambda a: eig_loss(*jaxmg.syevd(herm(a))), ("a",)),
    "syevd-w": (lambda a: jaxmg.syevd(herm(a), return_eigenvectors=False), ("a",)),
    "sygvd": (lambda a, b: eig_loss(*jaxmg.sygvd(herm(a), herm(b))), ("a", "b")),
    "gesvd": (lambda t: svd_loss(*jaxmg.gesvd(t)), ("t",)),
    "gesvd-s": (lambda t: jaxmg.gesvd(t, compute_u=False, compute_vh=False), ("t",)),
    "gesvd-full": (lambda t: svd_full_loss(*jaxmg.gesvd(t, full_matrices=True)), ("t",)),
    "polar": (lambda t: jaxmg.polar(t), ("t",)),
}

#: each function factors once and reads every output of that one module
MODULES = {
    "QR": (lambda t, rhs: (lambda f: (f.q, f.r, f.solve(rhs)))(jaxmg.QR(t)), ("t", "rhs")),
    "Eigh": (lambda a: (lambda f: eig_loss(f.w, f.v))(jaxmg.Eigh(herm(a))), ("a",)),
    "Eigh-pencil": (lambda a, b: (lambda f: eig_loss(f.w, f.v))(jaxmg.Eigh(herm(a), herm(b))), ("a", "b")),
    "SVD": (lambda t: (lambda f: svd_loss(f.u, f.s, f.vh))(jaxmg.SVD(t)), ("t",)),
    "Polar": (lambda t: (lambda f: (f.u_p, f.h))(jaxmg.Polar(t)), ("t",)),
}


def _check_grads(f, args):
    """check_grads eagerly at order 2, both modes. Its reverse checks compare against finite
    differences (eps 1e-4), whose error at order 2 reaches ~2e-5 relative here: rtol 1e-4."""
    check_grads(f, args, order=2, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


def _args(names, dtype, mesh):
    data = _data(dtype)
    return tuple(_put(data[k], mesh) if data[k].ndim == 2 else data[k] for k in names)


#: Eager check_grads at order 2 evaluates each operation at many points under nested eager
#: transformations (20-300 s per case on 2 cores): these run with `bash tests/run.sh --slow`
#: (CI runs them); the same derivatives are checked inside jit in test_autodiff.py and by the
#: jacfwd/hessian/jvp tests below in the default run.
@pytest.mark.slow
@pytest.mark.parametrize("name", [*FUNCTIONS, *MODULES])
def test_check_grads_eagerly(combo, name):
    """Every function (FUNCTIONS) and every module (MODULES)."""
    f, names = {**FUNCTIONS, **MODULES}[name]
    mesh, dtype = combo
    _check_grads(f, _args(names, dtype, mesh))


def test_jacfwd_and_hessian_match_jax_numpy(mesh):
    """jacfwd of eigenvalues and singular values, and hessian of a least-squares loss, against
    the same transformations of jnp.linalg."""
    data = _data(np.float64)
    a, t, rhs = _put(data["a"], mesh), _put(data["t"], mesh), data["rhs"]
    got = jax.jacfwd(lambda a: jaxmg.syevd(herm(a), return_eigenvectors=False))(a)
    want = jax.jacfwd(lambda a: jnp.linalg.eigvalsh((a + a.T) / 2))(data["a"])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-10)
    # not symmetrised: the eigenvalues of the matrix read from the lower triangle
    got = jax.jacfwd(lambda a: jaxmg.syevd(a, return_eigenvectors=False))(a)
    want = jax.jacfwd(lambda a: jnp.linalg.eigvalsh(lower_read(a)))(data["a"])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-10)
    got = jax.jacfwd(lambda t: jaxmg.gesvd(t, compute_u=False, compute_vh=False))(t)
    want = jax.jacfwd(lambda t: jnp.linalg.svd(t, compute_uv=False))(data["t"])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-10)
    got = jax.hessian(lambda b: jnp.sum(jaxmg.least_squares(t, b) ** 2))(rhs)
    want = jax.hessian(lambda b: jnp.sum(jnp.linalg.lstsq(data["t"], b)[0] ** 2))(rhs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-10)


def test_hessian_of_polar_and_qr_match_jax_numpy(mesh):
    """jax.hessian (forward over reverse) of losses of polar's U_p and of R, eagerly, against
    the same of U_p = U V^H from jnp.linalg.svd and of jnp.linalg.qr."""
    data = _data(np.float64)
    t = _put(data["t"], mesh)
    w = _weights((M, N), 11)
    got = jax.hessian(lambda t: jnp.sum(_whole(jaxmg.polar(t)[0]) ** 2 * w))(t)

    def reference_polar(t):
        u, _, vh = jnp.linalg.svd(t, full_matrices=False)
        return u @ vh

    want = jax.hessian(lambda t: jnp.sum(reference_polar(t) ** 2 * w))(data["t"])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-8)
    got = jax.hessian(lambda t: jnp.sum(_whole(jaxmg.qr(t)[1]) ** 3))(t)
    want = jax.hessian(lambda t: jnp.sum(jnp.linalg.qr(t)[1] ** 3))(data["t"])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-8)


def test_jvp_matches_jax_numpy_and_keeps_layouts(mesh):
    """jax.jvp of qr, eigh and svd against jnp.linalg's own JVP rules (same gauge), with
    matrix tangents in a's layout and vector tangents replicated. syevd reads a's lower
    triangle: along a tangent that is not Hermitian, its JVP is that of eigh(lower_read(a))."""
    data = _data(np.complex128)
    rng = np.random.default_rng(1)
    da = random_matrix(rng, (N, N), np.complex128)
    dt = random_matrix(rng, (M, N), np.complex128)
    a, t = _put(data["a"], mesh), _put(data["t"], mesh)
    checks = [
        (
            jax.jvp(lambda t: jaxmg.qr(t), (t,), (_put(dt, mesh),)),
            jax.jvp(lambda t: jnp.linalg.qr(t), (data["t"],), (dt,)),
        ),
        (
            jax.jvp(lambda a: jaxmg.syevd(a), (a,), (_put(da, mesh),)),
            jax.jvp(lambda a: jnp.linalg.eigh(lower_read(a)), (data["a"],), (da,)),
        ),
        (
            jax.jvp(lambda t: jaxmg.gesvd(t), (t,), (_put(dt, mesh),)),
            jax.jvp(lambda t: jnp.linalg.svd(t, full_matrices=False), (data["t"],), (dt,)),
        ),
    ]
    for (outs, dots), (ref_outs, ref_dots) in checks:
        for out, dot, ref_out, ref_dot in zip(outs, dots, ref_outs, ref_dots):
            # gauges agree when the primal outputs do (LAPACK on the same matrix)
            if np.allclose(np.asarray(out), np.asarray(ref_out), atol=1e-10):
                np.testing.assert_allclose(np.asarray(dot), np.asarray(ref_dot), atol=1e-9)
            expected = SPEC if dot.ndim == 2 else P()
            assert dot.sharding.is_equivalent_to(NamedSharding(mesh, expected), dot.ndim), dot.sharding


def test_degenerate_eigenvalues_give_finite_derivatives(mesh):
    """Exactly repeated eigenvalues: the terms between equal values are dropped (finite, where
    jnp.linalg.eigh gives nan), which is right for a loss invariant inside each eigenspace."""
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((N, N)))
    lam = np.array([1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0])
    c = np.array([0.5, 0.5, 0.5, -1.0, 2.0, 2.0, 0.3, 1.5])  # constant on each eigenspace
    g = rng.standard_normal((N, N))

    def loss(a):
        w, v = jaxmg.syevd(herm(a))
        v = _whole(v)
        return jnp.sum(g * ((v * c) @ v.T)) + jnp.sum(w**2)

    a = _put((q * lam) @ q.T, mesh)
    e = rng.standard_normal((N, N))
    e = (e + e.T) / 2
    grad = np.asarray(jax.grad(loss)(a))
    assert np.all(np.isfinite(grad))
    h = 1e-5
    fd = (loss(a + _put(h * e, mesh)) - loss(a - _put(h * e, mesh))) / (2 * h)
    np.testing.assert_allclose(np.sum(grad * e), fd, rtol=1e-6, atol=1e-8)


def test_repeated_singular_values_keep_the_coupling_that_is_defined(mesh):
    """Exactly repeated singular values: only the Hermitian part of U^H A' V couples equal
    values singularly; its skew-Hermitian part couples them by 1/(s_i + s_j), which is kept, so
    that the polar factor u vh (smooth there) has its exact derivative."""
    rng = np.random.default_rng(4)
    q1, _ = np.linalg.qr(rng.standard_normal((M, N)))
    q2, _ = np.linalg.qr(rng.standard_normal((N, N)))
    s = np.array([2.0, 2.0, 2.0, 1.5, 1.0, 1.0, 0.7, 0.5])
    g = rng.standard_normal((M, N))

    def loss(a):
        u, s, vh = jaxmg.gesvd(a)
        return jnp.sum(g * (_whole(u) @ _whole(vh))) + jnp.sum(s**2)

    a = _put((q1 * s) @ q2.T, mesh)
    e = _put(rng.standard_normal((M, N)), mesh)
    grad = np.asarray(jax.grad(loss)(a))
    h = 1e-5
    fd = (loss(a + h * e) - loss(a - h * e)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad * np.asarray(e)), fd, rtol=1e-6, atol=1e-8)
