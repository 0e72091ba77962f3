"""jaxmg.numpy.linalg and jaxmg.scipy.linalg against jax.numpy.linalg / jax.scipy.linalg.

Each check compares with JAX on the gathered input, up to the sign/phase freedom of
eigenvectors, singular vectors and Q (compared through reconstructions, orthonormality and
the invariant parts). Small matrices, several functions per compiled case.
"""

from __future__ import annotations

import functools
import inspect
import re

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
import scipy.linalg
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as mla
import jaxmg.scipy.linalg as msla
from helpers import AXES, make_mesh, put, random_matrix, same_spec, spd_matrix

# (mesh shape, axis names, axis type, spec of a): two-axis Explicit and Auto, one-axis rows and columns
MESHES = {
    "4x2-explicit": ((4, 2), ("x", "y"), AxisType.Explicit, P("x", "y")),
    "4x2-auto": ((4, 2), ("x", "y"), AxisType.Auto, P("x", "y")),
    "rows-8": ((8,), ("i",), AxisType.Explicit, P("i", None)),
    "cols-8-auto": ((8,), ("i",), AxisType.Auto, P(None, "i")),
}
# each mesh with one dtype, so that every mesh and every dtype is covered once
CASES = [
    ("4x2-explicit", np.float64),
    ("4x2-auto", np.complex128),
    ("rows-8", np.float32),
    ("cols-8-auto", np.complex64),
]


def _tol(dtype):
    return 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9


def _close(x, y, dtype, scale=1.0):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape, (x.shape, y.shape)
    err = np.max(np.abs(x - y)) if x.size else 0.0
    assert err <= _tol(dtype) * scale * max(1.0, np.max(np.abs(y)) if y.size else 1.0), err


def _orthonormal_columns(q, dtype):
    q = np.asarray(q)
    _close(q.conj().T @ q, np.eye(q.shape[1]), dtype, 10)


def _mesh(name):
    shape, names, kind, spec = MESHES[name]
    return make_mesh(shape, names, axis_types=kind), spec


def _problem(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        square=random_matrix(rng, (8, 8), dtype) + 4 * np.eye(8, dtype=dtype),
        spd=spd_matrix(rng, 8, dtype),
        tall=random_matrix(rng, (16, 8), dtype),
        wide=random_matrix(rng, (8, 16), dtype),
        b=random_matrix(rng, (8,), dtype),
        b16=random_matrix(rng, (16, 2), dtype),
    )


# --- signatures and coverage ------------------------------------------------------------------


def _parameters(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def test_signatures_match_jax():
    for name in mla.__all__:
        ours = getattr(mla, name)
        if name.endswith("Result"):  # JAX's own named tuples
            continue
        assert _parameters(ours) == _parameters(getattr(jnp.linalg, name)), name
    for name in msla.__all__:
        if name == "lstsq":  # JAX has no scipy lstsq: SciPy's signature
            scipy_linalg = pytest.importorskip("scipy.linalg")
            assert _parameters(msla.lstsq) == _parameters(scipy_linalg.lstsq)
            continue
        assert _parameters(getattr(msla, name)) == _parameters(getattr(jsl, name)), name
    # every name of jax.numpy.linalg is provided: test_dropin_names.py
    assert mla.EighResult is type(jnp.linalg.eigh(jnp.eye(2))) and mla.SVDResult is type(jnp.linalg.svd(jnp.eye(2)))


# --- results against JAX, per mesh and dtype -------------------------------------------------------


def _check_all(mla_fns, p, placed, dtype, jit):
    """Run the functions of jaxmg.numpy.linalg on the placed arrays (eagerly or in one jitted
    call) and compare with jax.numpy.linalg on the gathered ones."""

    def ours(sq, spd, tall, wide, b):
        return dict(
            solve=mla.solve(sq, b),
            inv=mla.inv(sq),
            slogdet=mla.slogdet(sq),
            det=mla.det(sq),
            chol=mla.cholesky(spd),
            chol_u=mla.cholesky(spd, upper=True),
            eigh=mla.eigh(spd),
            eigvalsh=mla.eigvalsh(spd, UPLO="U"),
            svd_tall=mla.svd(tall, full_matrices=False),
            svd_wide=mla.svd(wide),
            svdvals=mla.svdvals(wide),
            qr_tall=mla.qr(tall),
            qr_wide=mla.qr(wide),
            qr_r=mla.qr(sq, mode="r"),
            lstsq_tall=mla.lstsq(tall, jnp.ones(16, tall.dtype)),
            lstsq_wide=mla.lstsq(wide, b),
            pinv=mla.pinv(wide),
            rank=mla.matrix_rank(tall),
            cond=mla.cond(sq),
            norm2=mla.norm(sq, 2),
            nuc=mla.matrix_norm(sq, ord="nuc"),
        )

    fn = jax.jit(ours) if jit else ours
    out = fn(placed["square"], placed["spd"], placed["tall"], placed["wide"], placed["b"])
    sq, spd, tall, wide, b = (p[k] for k in ("square", "spd", "tall", "wide", "b"))
    la = jnp.linalg
    _close(out["solve"], la.solve(sq, b), dtype, 10)
    _close(out["inv"], la.inv(sq), dtype, 10)
    assert isinstance(out["slogdet"], type(la.slogdet(sq)))
    _close(out["slogdet"].sign, la.slogdet(sq).sign, dtype)
    _close(out["slogdet"].logabsdet, la.slogdet(sq).logabsdet, dtype, 10)
    _close(out["det"], la.det(sq), dtype, 10)
    _close(out["chol"], la.cholesky(spd), dtype, 10)
    _close(out["chol_u"], la.cholesky(spd, upper=True), dtype, 10)
    w, v = out["eigh"]
    _close(w, la.eigvalsh(spd), dtype, 10)
    _close(np.asarray(v) * np.asarray(w) @ np.asarray(v).conj().T, spd, dtype, 10)
    _close(out["eigvalsh"], la.eigvalsh(spd, UPLO="U"), dtype, 10)
    for key, a in (("svd_tall", tall), ("svd_wide", wide)):
        u, s, vh = out[key]
        assert u.shape == (a.shape[0], min(a.shape) if key == "svd_tall" else a.shape[0])
        assert vh.shape == ((8, 8) if key == "svd_tall" else (16, 16))
        _close(s, la.svd(a, compute_uv=False), dtype, 10)
        _close((np.asarray(u)[:, :8] * np.asarray(s)) @ np.asarray(vh)[:8], a, dtype, 10)
        _orthonormal_columns(u, dtype)
        _orthonormal_columns(np.asarray(vh).conj().T, dtype)
    _close(out["svdvals"], la.svdvals(wide), dtype, 10)
    for key, a in (("qr_tall", tall), ("qr_wide", wide)):
        q, r = out[key]
        q_ref, r_ref = la.qr(a)
        assert q.shape == q_ref.shape and r.shape == r_ref.shape
        _close(np.asarray(q) @ np.asarray(r), a, dtype, 10)
        _close(np.tril(np.asarray(r), -1), np.zeros(r.shape), dtype)
        _close(np.abs(np.diagonal(np.asarray(r))), np.abs(np.diagonal(r_ref)), dtype, 10)
        _orthonormal_columns(q, dtype)
    _close(np.abs(out["qr_r"]), np.abs(la.qr(sq, mode="r")), dtype, 10)
    for key, a, rhs in (("lstsq_tall", tall, jnp.ones(16, dtype)), ("lstsq_wide", wide, b)):
        for got, want in zip(out[key], la.lstsq(a, rhs)):
            _close(got, want, dtype, 100)
    _close(out["pinv"], la.pinv(wide), dtype, 100)
    assert int(out["rank"]) == int(la.matrix_rank(tall)) == 8
    _close(out["cond"], la.cond(sq), dtype, 100)
    _close(out["norm2"], la.norm(sq, 2), dtype, 10)
    _close(out["nuc"], la.matrix_norm(sq, ord="nuc"), dtype, 10)
    return out


@pytest.mark.parametrize("mesh_name,dtype", CASES, ids=[f"{m}-{np.dtype(d).name}" for m, d in CASES])
def test_numpy_linalg_against_jax(mesh_name, dtype):
    mesh, spec = _mesh(mesh_name)
    p = _problem(dtype)
    placed = {k: put(v, mesh, spec) if k in ("square", "spd", "tall", "wide") else v for k, v in p.items()}
    jit = mesh_name.endswith("auto")  # Auto meshes in jit, Explicit ones eagerly (and in the jit tests below)
    if jit:
        with jax.set_mesh(mesh):
            out = _check_all(mla, p, placed, dtype, jit=True)
    else:
        out = _check_all(mla, p, placed, dtype, jit=False)
    if not jit:  # matrix outputs stay in the input's layout
        for x in (
            out["inv"],
            out["chol"],
            out["chol_u"],
            out["eigh"].eigenvectors,
            out["pinv"],
            out["svd_tall"].U,
            out["qr_wide"].R,
        ):
            assert x.sharding.spec == spec or x.sharding.is_equivalent_to(placed["square"].sharding, 2), x.sharding


def test_explicit_mesh_in_jit_and_batched():
    """Explicit axes inside jax.jit, and leading batch dimensions (each matrix distributed)."""
    mesh, spec = _mesh("4x2-explicit")
    rng = np.random.default_rng(3)
    a = random_matrix(rng, (2, 3, 8, 8), np.float64) + 4 * np.eye(8)
    b = random_matrix(rng, (3, 8, 2), np.float64)
    batched = put(a, mesh, P(None, None, *spec))

    @jax.jit
    def f(a, b):
        return mla.solve(a, b), mla.inv(a), mla.slogdet(a), mla.eigvalsh(a), mla.svdvals(a), mla.qr(a, mode="r")

    with jax.set_mesh(mesh):
        x, ainv, (sign, logdet), w, s, r = f(batched, b)
    la = jnp.linalg
    _close(x, la.solve(a, b), np.float64, 10)
    _close(ainv, la.inv(a), np.float64, 10)
    _close(sign, la.slogdet(a).sign, np.float64)
    _close(logdet, la.slogdet(a).logabsdet, np.float64, 10)
    _close(w, la.eigvalsh(a), np.float64, 10)
    _close(s, la.svdvals(a), np.float64, 10)
    _close(np.abs(r), np.abs(la.qr(a, mode="r")), np.float64, 10)


def test_other_functions():
    """matrix_power (negative), tensorinv, tensorsolve, complete QR of a tall matrix, hermitian
    SVD and pinv, svd subset_by_index, and the re-exported product functions."""
    mesh, spec = _mesh("4x2-explicit")
    rng = np.random.default_rng(4)
    a = random_matrix(rng, (8, 8), np.float64) + 4 * np.eye(8)
    h = a + a.T
    tall = random_matrix(rng, (16, 8), np.float64)
    la = jnp.linalg
    _close(mla.matrix_power(put(a, mesh, spec), -3), la.matrix_power(a, -3), np.float64, 10)
    _close(mla.matrix_power(a, 5), la.matrix_power(a, 5), np.float64, 10)
    t = a.reshape(2, 4, 8)
    _close(mla.tensorinv(t, ind=2), la.tensorinv(t, ind=2), np.float64, 10)
    _close(mla.tensorsolve(t, np.ones((2, 4))), la.tensorsolve(t, np.ones((2, 4))), np.float64, 10)
    q, r = mla.qr(put(tall, mesh, spec), mode="complete")
    assert q.shape == (16, 16) and r.shape == (16, 8)
    _close(np.asarray(q) @ np.asarray(r), tall, np.float64, 10)
    _orthonormal_columns(q, np.float64)
    u, s, vh = mla.svd(put(h, mesh, spec), hermitian=True)
    _close(s, la.svd(h, hermitian=True, compute_uv=False), np.float64, 10)
    _close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), h, np.float64, 10)
    _close(mla.pinv(h, hermitian=True), la.pinv(h, hermitian=True), np.float64, 100)
    _close(mla.svd(tall, full_matrices=False, subset_by_index=(0, 3)).S, la.svdvals(tall)[:3], np.float64, 10)
    _close(mla.cond(a, "fro"), la.cond(a, "fro"), np.float64, 100)
    assert mla.matmul is la.matmul and mla.trace is la.trace and mla.outer is la.outer
    batch = np.stack([a, a + np.eye(8)])  # eagerly batched: in the input's layout
    inverses = mla.inv(put(batch, mesh, P(None, *spec)))
    assert inverses.sharding.spec == P(None, *spec)
    _close(inverses, la.inv(batch), np.float64, 10)


# --- derivatives -----------------------------------------------------------------------------------


def test_gradients_equal_jax():
    mesh, spec = _mesh("4x2-explicit")
    p = _problem(np.float64, seed=5)
    sq, spd, wide, b = p["square"], p["spd"], p["wide"], p["b"]

    def loss(la):
        def f(sq, spd, wide):
            w, v = la.eigh(spd)
            u, s, vh = la.svd(wide, full_matrices=False)
            return (
                la.slogdet(sq)[1]
                + jnp.sum(la.inv(sq) ** 2)
                + jnp.sum(la.solve(sq, b))
                + jnp.sum(w * jnp.arange(8))
                + jnp.sum(jnp.abs(v) ** 4)
                + jnp.sum(s**3)
                + jnp.sum(la.lstsq(wide, b)[0] ** 2)
                + jnp.sum(la.pinv(wide) ** 2)
                + jnp.sum(la.cholesky(spd))
            )

        return f

    with jax.set_mesh(mesh):
        ours = jax.jit(jax.grad(loss(mla), argnums=(0, 1, 2)))(*(put(x, mesh, spec) for x in (sq, spd, wide)))
    want = jax.grad(loss(jnp.linalg), argnums=(0, 1, 2))(sq, spd, wide)
    for got, ref in zip(ours, want):
        _close(got, ref, np.float64, 1e3)


def test_check_grads_first_order():
    p = _problem(np.float64, seed=6)
    check_grads(lambda a: mla.slogdet(a)[1], (p["square"],), order=1, modes=("fwd", "rev"))
    check_grads(lambda a: mla.solve(a, p["b"]), (p["square"],), order=1, modes=("rev",))
    check_grads(lambda a: mla.lstsq(a, p["b"])[0], (p["wide"],), order=1, modes=("rev",))
    check_grads(lambda a: mla.eigvalsh(a), (p["spd"],), order=1, modes=("fwd",))


# --- jaxmg.scipy.linalg ------------------------------------------------------------------------------


def _gp_loss(sl, k, y, lower):
    """A Gaussian process's negative log likelihood as written with jax.scipy.linalg: the factor
    of cho_factor read for the log determinant, and passed on to cho_solve."""
    c, lower = sl.cho_factor(k, lower=lower)
    return 0.5 * jnp.sum(y * sl.cho_solve((c, lower), y)) + jnp.sum(jnp.log(jnp.diagonal(c, axis1=-2, axis2=-1)))


@pytest.mark.parametrize("lower", [True, False])
def test_cho_factor_is_jax_array_factor_read_as_users_read_it(lower):
    """cho_factor's c is JAX's array (the factor in its ``lower`` triangle, zeros in the other), so
    that code written for jax.scipy.linalg reads it (jnp.diagonal(c) for a log determinant, c.T):
    values and gradients as JAX's, eagerly, in jit, on a stack and checked by check_grads."""
    rng = np.random.default_rng(11)
    k = spd_matrix(rng, 8, np.float64)
    y = rng.standard_normal(8)
    c, got_lower = msla.cho_factor(k, lower=lower)
    want_c, _ = jsl.cho_factor(k, lower=lower)
    assert isinstance(c, jax.Array) and got_lower is lower
    np.testing.assert_allclose(np.asarray(c), np.asarray(want_c), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(c.T @ c if not lower else c @ c.T), k, rtol=1e-12, atol=1e-12)
    want = jax.value_and_grad(_gp_loss, argnums=(1, 2))(jsl, k, y, lower)
    for fn in (_gp_loss, jax.jit(_gp_loss, static_argnums=(0, 3))):
        got = jax.value_and_grad(fn, argnums=(1, 2))(msla, k, y, lower)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)
    check_grads(lambda m, y: _gp_loss(msla, m @ m.T, y, lower), (k, y), order=2, modes=("fwd", "rev"))
    stack = np.stack([k, k + np.eye(8)])
    np.testing.assert_allclose(
        np.asarray(jax.vmap(functools.partial(_gp_loss, msla, lower=lower), in_axes=(0, None))(stack, y)),
        np.asarray(jax.vmap(functools.partial(_gp_loss, jsl, lower=lower), in_axes=(0, None))(stack, y)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        np.asarray(msla.cho_factor(stack, lower=lower)[0]),
        np.asarray(jsl.cho_factor(stack, lower=lower)[0]),
        rtol=1e-12,
    )


@pytest.mark.parametrize("mesh_name,dtype", [("4x2-explicit", np.complex128), ("cols-8-auto", np.float32)])
def test_scipy_linalg_against_jax(mesh_name, dtype):
    mesh, spec = _mesh(mesh_name)
    p = _problem(dtype, seed=7)
    sq, spd, wide, tall, b = (p[k] for k in ("square", "spd", "wide", "tall", "b"))
    placed = {k: put(v, mesh, spec) for k, v in p.items() if k in ("square", "spd", "tall", "wide")}
    with jax.set_mesh(mesh):
        c, lower = msla.cho_factor(placed["spd"])  # JAX's (c, lower): the upper factor, in a's layout
        assert isinstance(c, jax.Array) and lower is False and c.sharding.spec == placed["spd"].sharding.spec
        _close(c, jsl.cho_factor(spd)[0], dtype, 10)
        want = jsl.cho_solve(jsl.cho_factor(spd), b)
        _close(msla.cho_solve((c, lower), b), want, dtype, 10)
        _close(msla.cho_solve((jaxmg.Cholesky(placed["spd"]), True), b), want, dtype, 10)
        _close(msla.cho_solve(jsl.cho_factor(spd, lower=True), b), np.linalg.solve(spd, b), dtype, 10)
        lu, piv = msla.lu_factor(placed["square"])
        for trans in (0, 1, 2):
            _close(msla.lu_solve((lu, piv), b, trans=trans), jsl.lu_solve(jsl.lu_factor(sq), b, trans=trans), dtype, 10)
        _close(
            msla.solve(placed["spd"], b, assume_a="pos", lower=True),
            jsl.solve(spd, b, assume_a="pos", lower=True),
            dtype,
            10,
        )
        _close(msla.solve(placed["square"], b), jsl.solve(sq, b), dtype, 10)
        _close(msla.inv(placed["square"]), jsl.inv(sq), dtype, 10)
        _close(msla.det(placed["square"]), jsl.det(sq), dtype, 10)
        _close(msla.cholesky(placed["spd"]), jsl.cholesky(spd), dtype, 10)
        _close(msla.eigh(placed["square"], eigvals_only=True), jsl.eigh(sq, eigvals_only=True), dtype, 10)
        w, v = msla.eigh(placed["spd"], placed["spd"] + 0 * placed["spd"] + put(np.eye(8, dtype=dtype), mesh, spec))
        # JAX < 0.12: no b
        _close(w, scipy.linalg.eigh(spd, spd + np.eye(8, dtype=dtype), eigvals_only=True), dtype, 10)
        u, s, vh = msla.svd(placed["wide"])
        assert u.shape == (8, 8) and vh.shape == (16, 16)
        _close(s, jsl.svd(wide, compute_uv=False), dtype, 10)
        q, r = msla.qr(placed["tall"], mode="economic")
        _close(np.asarray(q) @ np.asarray(r), tall, dtype, 10)
        (r_full,) = msla.qr(placed["wide"], mode="r")
        _close(np.abs(r_full), np.abs(jsl.qr(wide, mode="r")[0]), dtype, 10)
        for side, a in (("right", sq), ("left", wide)):
            u, h = msla.polar(put(a, mesh, spec), side=side)
            u_ref, h_ref = jsl.polar(a, side=side, method="svd")
            _close(u, u_ref, dtype, 100)
            _close(h, h_ref, dtype, 100)
        x, resid, rank, s = msla.lstsq(placed["tall"], p["b16"])
        ref = np.linalg.lstsq(tall, p["b16"], rcond=None)
        _close(x, ref[0], dtype, 100)
        _close(resid, ref[1], dtype, 100)
        assert int(rank) == 8


# --- a model written against jnp.linalg --------------------------------------------------------------


def _gp_model(la):
    """A Gaussian-process negative log marginal likelihood and its posterior mean, written
    against a ``jax.numpy.linalg``-like module ``la``."""

    def nll(log_scale, x, y):
        k = jnp.exp(-((x[:, None] - x[None, :]) ** 2) / jnp.exp(log_scale)) + 0.5 * jnp.eye(x.shape[0])
        alpha = la.solve(k, y)
        sign, logdet = la.slogdet(k)
        return 0.5 * y @ alpha + 0.5 * logdet, alpha

    return nll


@pytest.mark.parametrize("eig_type", [1, 2, 3])
def test_generalized_eigh_of_every_type_as_jax(eig_type):
    """jax.scipy.linalg.eigh(a, b, type=1, 2 or 3): eigenvalues and eigenvectors as JAX's
    (eigenvectors normalised alike: v^H b v = I, or v^H b^-1 v = I for type 3), b's batch
    dimensions broadcast against a's, on an Explicit mesh, and derivatives in a and b."""
    rng = np.random.default_rng(11)
    a = random_matrix(rng, (2, 8, 8), np.complex128)
    a = a + np.conj(np.swapaxes(a, -1, -2))
    b = spd_matrix(rng, 8, np.complex128)
    mesh, spec = _mesh("4x2-explicit")
    w_ref, v_ref = jsl.eigh(a, b, type=eig_type)
    with jax.set_mesh(mesh):
        w, v = msla.eigh(a, put(b, mesh, spec), type=eig_type)
        w0, v0 = msla.eigh(put(a[0], mesh, spec), put(b, mesh, spec), type=eig_type)
    assert v0.sharding.spec == spec
    _close(w, w_ref, np.complex128, 10)
    _close(w0, w_ref[0], np.complex128, 10)
    gram = np.linalg.inv(b) if eig_type == 3 else b
    for vv in (np.asarray(v)[0], np.asarray(v0)):
        _close(vv.conj().T @ gram @ vv, np.eye(8), np.complex128, 10)
        _close(np.abs(vv), np.abs(np.asarray(v_ref)[0]), np.complex128, 1e3)  # phases apart, as JAX's
    _close(msla.eigh(a, b, type=eig_type, eigvals_only=True), w_ref, np.complex128, 10)

    def loss(x, y):
        return msla.eigh(x + jnp.conj(x.T), y @ jnp.conj(y.T) + np.eye(8), type=eig_type)

    check_grads(lambda x, y: (loss(x, y)[0], jnp.abs(loss(x, y)[1]) ** 2), (a[0], b), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["float64", "complex128"])
def test_lstsq_derivatives_at_repeated_singular_values(dtype):
    """lstsq's solution is pinv(a) b, smooth where the rank is constant: a design with
    orthogonal columns of equal norm (every singular value repeated) and a wide one have its
    exact first derivatives in a and b, and so have the residuals."""
    rng = np.random.default_rng(12)
    design = 2 * np.linalg.qr(random_matrix(rng, (8, 4), dtype))[0]
    for a in (design, random_matrix(rng, (4, 8), dtype)):
        b = random_matrix(rng, (a.shape[0], 2), dtype)
        check_grads(lambda x, y: mla.lstsq(x, y)[:2], (a, b), order=1, modes=("fwd", "rev"))
        check_grads(lambda x, y: mla.lstsq(x, y)[0], (a, b[:, 0]), order=1, modes=("fwd", "rev"))


def test_svd_subset_by_index_as_jax():
    """subset_by_index=(0, min(M, N)) keeps full matrices (JAX's shapes); another range with
    full_matrices is JAX's ValueError; with full_matrices=False it keeps that range."""
    a = random_matrix(np.random.default_rng(13), (6, 4), np.float64)
    shapes = [x.shape for x in mla.svd(a, subset_by_index=(0, 4))]
    assert shapes == [x.shape for x in jnp.linalg.svd(a, subset_by_index=(0, 4))] == [(6, 6), (4,), (4, 4)]
    for compute_uv in (True, False):
        with pytest.raises(ValueError, match="full_matrices and subset_by_index"):
            mla.svd(a, compute_uv=compute_uv, subset_by_index=(1, 3))
    u, s, vh = mla.svd(a, full_matrices=False, subset_by_index=(1, 3))
    assert (u.shape, s.shape, vh.shape) == ((6, 2), (2,), (2, 4))
    _close(
        (np.asarray(u) * np.asarray(s)) @ np.asarray(vh),
        np.linalg.svd(a)[0][:, 1:3] * np.linalg.svd(a)[1][1:3] @ np.linalg.svd(a)[2][1:3],
        np.float64,
        10,
    )


@pytest.mark.parametrize(
    "subset, error",
    [((-1, 2), ValueError), ((0, 5), ValueError), ((3, 1), ValueError), ((0,), TypeError), ((0.0, 2.0), TypeError)],
)
def test_svd_subset_by_index_out_of_range_names_the_range(subset, error):
    """A range outside 0 <= start <= end <= min(M, N), or not a pair of ints, is refused with the
    valid range (it failed inside a slice, or was sliced from the end)."""
    a = random_matrix(np.random.default_rng(13), (6, 4), np.float64)
    with pytest.raises(error, match=r"svd: subset_by_index.*(min\(M, N\) = 4|a pair of ints)"):
        mla.svd(a, full_matrices=False, subset_by_index=subset)


def test_scipy_lstsq_is_scipys():
    """scipy's lstsq as SciPy's: the default cutoff is eps (singular values between eps s0 and
    max(M, N) eps s0 are kept), the residues are a scalar for a vector b, NaN where the rank is
    below N and empty for M <= N; their shapes depend on the shapes alone, so it runs in jax.jit."""
    rng = np.random.default_rng(21)
    u, _ = np.linalg.qr(rng.standard_normal((8, 4)))
    graded = u * np.array([1.0, 1e-1, 1e-2, 4e-16])  # its last singular value: 2 eps, below 8 eps
    cases = [
        (graded, rng.standard_normal(8)),  # SciPy keeps the last singular value: rank 4
        (random_matrix(rng, (6, 3), np.complex128), random_matrix(rng, (6, 2), np.complex128)),
        (np.ones((6, 3)), rng.standard_normal(6)),  # rank 1: NaN residues
        (rng.standard_normal((3, 6)), rng.standard_normal(3)),  # wide: empty residues
    ]
    for a, b in cases:
        want = scipy.linalg.lstsq(a, b)
        for got in (msla.lstsq(a, b), jax.jit(msla.lstsq)(a, b)):
            assert [np.shape(g) for g in got] == [np.shape(w) for w in want]
            assert int(got[2]) == want[2]
            if a is graded:  # x (about 1e15) and its residues agree only to cond(a) eps
                continue
            np.testing.assert_allclose(np.asarray(got[1]), np.real(want[1]), rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-8, atol=1e-10)


def test_hermitian_svd_orders_equal_singular_values_as_jax():
    """svd(hermitian=True) of a matrix with eigenvalues w and -w: the same U and Vh as JAX's
    (ascending |w| sorted stably, then reversed), not only the same singular values."""
    a = np.diag([1.0, -1.0, 0.5, 2.0, -2.0])
    for x, y in zip(mla.svd(a, hermitian=True), jnp.linalg.svd(a, hermitian=True)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_model_with_switched_import():
    mesh, _ = _mesh("4x2-auto")
    x = jnp.linspace(0.0, 1.0, 16)
    y = jnp.sin(6 * x)
    ref_value, ref_grad = jax.value_and_grad(lambda s: _gp_model(jnp.linalg)(s, x, y)[0])(0.1)
    with jax.set_mesh(mesh):
        value, grad = jax.jit(jax.value_and_grad(lambda s: _gp_model(mla)(s, x, y)[0]))(0.1)
    np.testing.assert_allclose(value, ref_value, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8)


def test_bad_arguments():
    with pytest.raises(ValueError, match="square"):
        mla.inv(np.ones((4, 6)))
    with pytest.raises(ValueError, match="UPLO"):
        mla.eigh(np.eye(4), UPLO="X")
    with pytest.raises(ValueError, match="mode"):
        mla.qr(np.eye(4), mode="economic")
    with pytest.raises(ValueError, match="only one of rtol and rcond"):
        mla.pinv(np.eye(4), rtol=0.1, rcond=0.1)
    for trans in (3, "T"):  # JAX's lu_solve takes 0, 1 and 2 alone (solve_triangular also takes "N", "T", "C")
        with pytest.raises(ValueError, match="'trans' value must be 0, 1, or 2"):
            msla.lu_solve(msla.lu_factor(np.eye(8)), np.ones(8), trans=trans)
    with pytest.raises(ValueError, match="mode"):
        msla.qr(np.eye(8), mode="raw")


def test_lstsq_of_a_b_of_rank_three_is_jaxs_type_error():
    """As jnp.linalg.lstsq: a b that is neither (M,) nor (M, K) is a TypeError (a mismatched M a
    ValueError)."""
    a, b = np.eye(4), np.ones((4, 2, 1))
    with pytest.raises(TypeError):
        jnp.linalg.lstsq(a, b)
    with pytest.raises(TypeError, match=r"lstsq: b must be \(M,\) or \(M, K\), got shape \(4, 2, 1\)"):
        mla.lstsq(a, b)
    with pytest.raises(ValueError, match="lstsq: b must have shape"):
        mla.lstsq(a, np.ones(3))


@pytest.mark.parametrize("shape", [(4,), ()])
@pytest.mark.parametrize(
    "module, name",
    [
        ("numpy", "svd"),
        ("numpy", "svdvals"),
        ("numpy", "qr"),
        ("scipy", "svd"),
        ("scipy", "qr"),
        ("scipy", "lu_factor"),
        ("scipy", "lu"),
    ],
)
def test_decompositions_of_fewer_than_two_dimensions_raise_jax_errors(module, name, shape):
    """A vector or a scalar given to a decomposition is JAX's error: its TypeError (rank at least
    2), or for scipy's lu, which JAX maps with jnp.vectorize, its ValueError."""
    theirs, ours = (jnp.linalg, mla) if module == "numpy" else (jsl, msla)
    error = ValueError if (module, name) == ("scipy", "lu") else TypeError
    with pytest.raises(error, match="rank at least 2|enough dimensions"):
        getattr(theirs, name)(np.ones(shape))
    message = rf"{name.removesuffix('vals')}: a must be a matrix .*got shape {re.escape(str(shape))}"
    with pytest.raises(error, match=message):
        getattr(ours, name)(np.ones(shape))


@pytest.mark.parametrize(
    "call",
    [
        lambda la: la.norm(np.ones((3, 4)), ord=2, axis=(5, 6)),
        lambda la: la.norm(np.ones((2, 3, 4)), ord="nuc", axis=(-4, 1)),
        lambda la: la.norm(np.ones((2, 3, 4)), ord=-2, axis=(1, 1)),
        lambda la: la.tensorsolve(np.eye(6).reshape(6, 2, 3), np.ones(6), axes=(5,)),
        lambda la: la.tensorsolve(np.eye(6).reshape(3, 2, 6), np.ones((2, 3))),
    ],
    ids=["norm-out-of-bounds", "norm-negative-out-of-bounds", "norm-repeated", "tensorsolve-axes", "tensorsolve-shape"],
)
def test_axes_that_jax_refuses_are_refused(call):
    """An axis out of bounds or repeated, and a tensorsolve whose b is not a's leading shape, are
    a ValueError, as JAX's (they were wrapped around, or reshaped, into a result; JAX's own norm
    over a repeated axis fails in its transpose, a TypeError, where NumPy's says ValueError)."""
    with pytest.raises((ValueError, TypeError)):
        call(jnp.linalg)
    with pytest.raises(ValueError, match="out of bounds|repeats an axis|leading shape"):
        call(mla)


@pytest.mark.parametrize("ord", [None, 2])
def test_norm_takes_numpy_integer_axes_as_jax(ord):
    """``axis`` as a NumPy integer (as ``np.argmax`` or a shape arithmetic gives it), alone or in a
    tuple, is an axis, as in JAX's norm: a vector norm over one axis, a matrix norm over two."""
    x = np.arange(24.0).reshape(2, 3, 4) - 11.0
    one, two = np.int64(1), (np.int64(0), np.int64(2))
    np.testing.assert_allclose(mla.norm(x, ord, one), jnp.linalg.norm(x, ord, one), rtol=1e-12)
    np.testing.assert_allclose(mla.norm(x, ord, two, True), jnp.linalg.norm(x, ord, two, True), rtol=1e-12)


# --- wide matrices in the top-level functions and modules -----------------------------------------


def test_wide_matrices_in_jaxmg_functions_and_modules():
    mesh, spec = _mesh("4x2-explicit")
    rng = np.random.default_rng(8)
    dtype = np.complex128
    w = random_matrix(rng, (8, 16), dtype)
    b = random_matrix(rng, (8,), dtype)
    placed = put(w, mesh, spec)
    minimum_norm = np.linalg.lstsq(w, b, rcond=None)[0]
    _close(jaxmg.least_squares(placed, b), minimum_norm, dtype, 10)
    _close(jaxmg.least_squares(placed, b, T_A=3), minimum_norm, dtype, 10)  # a tile that does not divide
    q3, r3 = jaxmg.qr(placed, T_A=3)
    _close(np.asarray(q3) @ np.asarray(r3), w, dtype, 10)
    factor = jaxmg.QR(placed)
    assert factor.shape == (8, 16)
    _close(factor.solve(b), minimum_norm, dtype, 10)
    q, r = factor.q, factor.r
    assert q.shape == (8, 8) and r.shape == (8, 16) and tuple(r.sharding.spec) == tuple(spec)
    _close(np.asarray(q) @ np.asarray(r), w, dtype, 10)
    u, s, vh = jaxmg.gesvd(placed, full_matrices=True)
    assert u.shape == (8, 8) and vh.shape == (16, 16) and jaxmg.SVD(placed).shape == (8, 16)
    _close(s, np.linalg.svd(w, compute_uv=False), dtype, 10)
    _close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh)[:8], w, dtype, 10)
    with jax.set_mesh(mesh):  # derivatives: the wide paths are compositions of differentiable operations
        grad = jax.jit(jax.grad(lambda a: jnp.sum(jnp.abs(jaxmg.least_squares(a, b)) ** 2)))(placed)
    want = jax.grad(lambda a: jnp.sum(jnp.abs(jnp.linalg.lstsq(a, b)[0]) ** 2))(w)
    _close(grad, want, dtype, 100)
    with pytest.raises(ValueError, match="side='left'"):
        jaxmg.polar(placed)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
def test_complete_qr_of_a_tall_sharded_matrix_inside_set_mesh(dtype):
    """mode="complete" (and jax.scipy's default, full) of a tall matrix sharded P("x", "y") inside
    jax.set_mesh, 2-D and batched: the random completing block is laid out with a's rows."""
    import jaxmg.numpy.linalg as mla
    import jaxmg.scipy.linalg as msla

    mesh = jax.make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(3)
    a_np = rng.standard_normal((24, 16)).astype(dtype)
    stack_np = rng.standard_normal((3, 24, 16)).astype(dtype)
    a = jax.device_put(a_np, NamedSharding(mesh, P("x", "y")))
    stack = jax.device_put(stack_np, NamedSharding(mesh, P(None, "x", "y")))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    with jax.set_mesh(mesh):
        for q, r, want in (
            mla.qr(a, mode="complete") + (a_np,),
            msla.qr(a) + (a_np,),
            mla.qr(stack, mode="complete") + (stack_np,),
        ):
            q, r = np.asarray(q), np.asarray(r)
            assert q.shape[-2:] == (24, 24) and r.shape[-2:] == (24, 16)
            np.testing.assert_allclose(q @ r, want, atol=tol * 10)
            np.testing.assert_allclose(
                np.swapaxes(q.conj(), -1, -2) @ q, np.broadcast_to(np.eye(24), q.shape), atol=tol
            )


def _qr_ratios(q, r, a):
    """LAPACK's QR test ratios: ||Q R - A|| / (M eps ||A||) and ||Q^H Q - I|| / (M eps), per matrix."""
    q, r, a = (np.asarray(x) for x in (q, r, a))
    eps, m = np.finfo(a.dtype).eps, a.shape[-2]
    norm = np.linalg.norm(a, axis=(-2, -1), keepdims=True)
    residual = np.linalg.norm(q @ r - a, axis=(-2, -1)) / (m * eps * norm[..., 0, 0])
    gram = np.swapaxes(q.conj(), -1, -2) @ q
    orthogonality = np.linalg.norm(gram - np.eye(gram.shape[-1]), axis=(-2, -1)) / (m * eps)
    return residual.max(), orthogonality.max()


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=["float64", "complex64"])
@pytest.mark.parametrize("mode", ["complete", "reduced"])
def test_qr_of_a_stack_split_over_its_batch_axis_on_explicit_axes(mode, dtype):
    """qr of a (8, 6, 4) stack split over its batch axis on a (4, 2) Explicit mesh, eagerly (where
    jaxmg enters the stack's mesh, in which JAX's own QR fails to mask its triangle), in jit and
    in a jax.shard_map manual over "x" alone with the stack split over the free "y" axis: JAX's
    factors (LAPACK's Householder completion included) within LAPACK's test ratios, in the stack's
    layout."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(5)
    a_np = random_matrix(rng, (8, 6, 4), dtype)
    a_np[1, :, 3] = a_np[1, :, 0]  # rank-deficient: the exact factor, as LAPACK's
    q_want, r_want = jnp.linalg.qr(a_np, mode=mode)
    qr = functools.partial(mla.qr, mode=mode)
    partial = jax.shard_map(qr, mesh=mesh, in_specs=P(), out_specs=P(), axis_names={"x"})
    for spec, fn in ((P("x"), qr), (P("x"), jax.jit(qr)), (P("y"), jax.jit(partial)), (P("y"), partial)):
        a = put(a_np, mesh, spec)
        with jax.set_mesh(mesh):
            q, r = fn(a)
        assert same_spec(q, spec) and same_spec(r, spec), (spec, q.sharding, r.sharding)
        assert max(_qr_ratios(q, r, a_np)) <= 30
        tol = 1e-4 if dtype == np.complex64 else 1e-12
        np.testing.assert_allclose(np.asarray(q), np.asarray(q_want), atol=tol)
        np.testing.assert_allclose(np.asarray(r), np.asarray(r_want), atol=tol)
    np.testing.assert_array_equal(np.asarray(a), a_np)


def test_complete_qr_derivatives_are_jax():
    """The complete QR of a tall a is differentiated as JAX differentiates its own (the completion
    columns' too): JAX's tangents and gradients; reduced QR's own derivative is checked."""
    a = random_matrix(np.random.default_rng(6), (6, 4), np.float64)
    t = random_matrix(np.random.default_rng(7), (6, 4), np.float64)
    ours = jax.jvp(lambda a: mla.qr(a, mode="complete"), (a,), (t,))[1]
    jaxs = jax.jvp(lambda a: jnp.linalg.qr(a, mode="complete"), (a,), (t,))[1]
    for x, y in zip(ours, jaxs):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)
    grad = jax.grad(lambda a, qr: jnp.sum(jnp.sin(qr(a, mode="complete")[0])))
    np.testing.assert_allclose(np.asarray(grad(a, mla.qr)), np.asarray(grad(a, jnp.linalg.qr)), rtol=1e-10, atol=1e-12)
    check_grads(lambda a: mla.qr(a), (a,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("b_shape", [(8,), (8, 3), (2, 8, 3), (1, 8, 3), (8, 8)])
def test_solve_right_hand_sides_as_jax(b_shape):
    """solve takes the right-hand sides jnp.linalg.solve takes, with its results: (N,) for every
    matrix, (..., N, K) broadcast."""
    rng = np.random.default_rng(0)
    a = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(2)])
    b = rng.standard_normal(b_shape)
    np.testing.assert_allclose(np.asarray(mla.solve(a, b)), np.asarray(jnp.linalg.solve(a, b)), rtol=1e-10)


@pytest.mark.parametrize(
    "b_shape,message",
    [
        ((2, 8), r"solve\(a, b\[\.\.\., None\]\)\[\.\.\., 0\]"),  # JAX refuses a batch of vectors
        ((7,), r"b must be \(8,\)"),
        ((2, 7, 1), r"b must be \(\.\.\., 8, K\)"),
        ((3, 8, 1), "do not broadcast"),
    ],
)
def test_solve_refuses_what_jax_refuses(b_shape, message):
    a = np.stack([np.eye(8)] * 2)
    b = np.ones(b_shape)
    with pytest.raises(ValueError):
        jnp.linalg.solve(a, b)
    with pytest.raises(ValueError, match=message):
        mla.solve(a, b)


@pytest.mark.parametrize("b_shape", [(8,), (8, 3), (2, 8), (2, 8, 3), (2, 7), (2, 7, 1), (8, 2, 8, 1)])
def test_scipy_positive_solve_takes_the_right_hand_sides_jax_takes(b_shape):
    """solve(assume_a="pos") reads b as JAX's does: (..., N), one vector per matrix, or
    (..., N, K), with its values and derivatives; other shapes are JAX's ValueError, whose message
    names both shapes (not a failure inside the product of a and x)."""
    rng = np.random.default_rng(0)
    a = (
        np.stack([spd_matrix(rng, 8, np.float64) for _ in range(2)])
        if len(b_shape) > 1
        else spd_matrix(rng, 8, np.float64)
    )
    b = rng.standard_normal(b_shape)

    def loss(sl, a, b):
        return jnp.sum(jnp.sin(sl.solve(a, b, assume_a="pos", lower=True)))

    try:
        want = jax.value_and_grad(functools.partial(loss, jsl), (0, 1))(a, b)
    except ValueError:
        with pytest.raises(ValueError, match=r"solve\(assume_a='pos'\): b must be .*got a of shape .* and b of shape"):
            msla.solve(a, b, assume_a="pos")
        return
    got = jax.value_and_grad(functools.partial(loss, msla), (0, 1))(a, b)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)


RANK_PROMOTED = {
    "solve": lambda la, a, b: la.solve(a, b),
    "cho_solve": lambda la, a, b: la.cho_solve((jnp.linalg.cholesky(a), True), b),
    "lu_solve": lambda la, a, b: la.lu_solve(la.lu_factor(a), b),
    "solve_triangular": lambda la, a, b: la.solve_triangular(a, b, lower=True),
    "eigh": lambda la, a, b: la.eigh(a, jnp.broadcast_to(2 * jnp.eye(8), b.shape[:-1] + (8,)), eigvals_only=True),
}


@pytest.mark.parametrize("name", sorted(RANK_PROMOTED))
@pytest.mark.parametrize("b_shape", [(8, 3), (3, 2, 8, 3)])
def test_rank_promotion_of_batch_dimensions_follows_jax_config(name, b_shape):
    """A stack a (2, N, N) with b of fewer or more batch dimensions is broadcast as JAX broadcasts
    it, and under jax.numpy_rank_promotion("raise") refused as JAX's own functions refuse it
    ("warn": JAX's warning)."""
    fn = RANK_PROMOTED[name]
    rng = np.random.default_rng(0)
    a = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(2)])
    b = rng.standard_normal(b_shape)
    module = (mla, jnp.linalg) if name == "solve" else (msla, jsl)
    np.testing.assert_allclose(fn(module[0], a, b), fn(module[1], a, b), rtol=1e-9)
    with jax.numpy_rank_promotion("raise"):
        with pytest.raises(ValueError):
            fn(module[1], a, b)
        with pytest.raises(ValueError, match="jax_numpy_rank_promotion='raise'"):
            fn(module[0], a, b)
    with jax.numpy_rank_promotion("warn"), pytest.warns(UserWarning, match="rank promotion"):
        fn(module[0], a, b)


# the scipy solves that take JAX's batch of vectors (b (..., N) with a (..., N, N)), and the fix
# that JAX's FutureWarning names
BATCHED_VECTOR_SOLVES = {
    "lu_solve": (lambda sl, a, b: sl.lu_solve(sl.lu_factor(a), b, trans=1), "lu_and_piv"),
    "solve_triangular": (lambda sl, a, b: sl.solve_triangular(a, b, trans="C", lower=True), "a"),
    "cho_solve": (lambda sl, a, b: sl.cho_solve((jnp.linalg.cholesky(a), True), b), "c_and_lower"),
}


@pytest.mark.parametrize("name", sorted(BATCHED_VECTOR_SOLVES))
def test_scipy_solves_take_a_batch_of_vectors_as_jax(name):
    """lu_solve, solve_triangular and cho_solve read b (..., N), one dimension fewer than the
    factors (..., N, N), as one vector for each matrix, as JAX's do (with JAX's FutureWarning
    and fix), on a stack split over its batch axis too; the derivative is JAX's."""
    fn, first = BATCHED_VECTOR_SOLVES[name]
    fix = re.escape(f"Use {name}({first}, b[..., None]).squeeze(-1)")
    rng = np.random.default_rng(0)
    a = np.stack([spd_matrix(rng, 8, np.complex128) for _ in range(8)])
    b = random_matrix(rng, (8, 8), np.complex128)
    tangents = (b[:, None, :] * a, b)
    with pytest.warns(FutureWarning, match=fix):
        want = fn(jsl, a, b)
        want_tangent = jax.jvp(functools.partial(fn, jsl), (a, b), tangents)[1]
    with pytest.warns(FutureWarning, match=fix):
        got = fn(msla, a, b)
        tangent = jax.jvp(functools.partial(fn, msla), (a, b), tangents)[1]
        mesh = make_mesh((4, 2), ("x", "y"))
        on_mesh = jax.jit(functools.partial(fn, msla))(put(a, mesh, P("x")), put(b, mesh, P("x")))
    for x in (got, on_mesh):
        np.testing.assert_allclose(np.asarray(x), np.asarray(want), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(want_tangent), rtol=1e-9)


SHARED_MATRIX_SOLVES = {
    "cho_solve": (
        lambda a, b: msla.cho_solve(msla.cho_factor(a), b),
        lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b),
    ),
    "cho_solve module": (
        lambda a, b: msla.cho_solve((jaxmg.Cholesky(a), True), b),
        lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b),  # the module reads a's lower triangle
    ),
    "lu_solve": (
        lambda a, b: msla.lu_solve(msla.lu_factor(a), b, trans=1),
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=1),
    ),
    "lu_solve module": (
        lambda a, b: msla.lu_solve((jaxmg.LU(a), None), b, trans=1),
        lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b, trans=1),
    ),
    "numpy solve": (mla.solve, jnp.linalg.solve),
    "scipy solve": (msla.solve, jsl.solve),
    "solve_triangular": (
        lambda a, b: msla.solve_triangular(a, b, lower=True, trans=2),
        lambda a, b: jsl.solve_triangular(a, b, lower=True, trans=2),
    ),
}


@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("name", sorted(SHARED_MATRIX_SOLVES))
def test_one_matrix_solves_a_stack_of_right_hand_sides(name, axis_type):
    """A solve with one matrix or factor (cho_solve and lu_solve with JAX's arrays or with
    jaxmg.Cholesky / jaxmg.LU, solve, solve_triangular) solves each matrix of a stack b
    (..., N, K), as JAX broadcasts its matrix, a stack split over its batch axis included (x in
    b's layout; on Explicit axes JAX's own batching of the solve refuses that split)."""
    rng = np.random.default_rng(1)
    a = spd_matrix(rng, 8, np.float64)
    b = rng.standard_normal((2, 4, 8, 3))
    fn, reference = SHARED_MATRIX_SOLVES[name]
    want = reference(a, b)
    np.testing.assert_allclose(np.asarray(fn(a, b)), np.asarray(want), rtol=1e-10)
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a_whole, b_split = put(a, mesh, P()), put(b, mesh, P(None, "x"))
    loss = lambda f: lambda a, b: jnp.sum(f(a, b) ** 2)  # noqa: E731
    want_grads = jax.grad(loss(reference), argnums=(0, 1))(a, b)
    with jax.set_mesh(mesh):
        for x in (fn(a_whole, b_split), jax.jit(fn)(a_whole, b_split)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(want), rtol=1e-10)
            if axis_type == AxisType.Explicit:
                assert same_spec(x, P(None, "x"))
        grads = jax.jit(jax.grad(loss(fn), argnums=(0, 1)))(a_whole, b_split)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("name", ["cho_solve", "lu_solve"])
def test_stacked_factor_modules_broadcast_against_b_as_jax(name, axis_type):
    """cho_factor of a stack (..., N, N) is JAX's stacked factor; it, and a stack of modules made
    under jax.vmap, solve with b (..., N, K) broadcast against it, b (N,) shared and b (..., N)
    one vector per matrix, as JAX's cho_solve and lu_solve do (not every factor against every
    right-hand side); on a stack split over its batch axis, x in b's layout, and the derivative
    is JAX's."""
    rng = np.random.default_rng(2)
    a = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(4)])
    if name == "cho_solve":
        fn = lambda sl, a, b: sl.cho_solve(sl.cho_factor(a, lower=True), b)  # noqa: E731
        mapped = lambda a, b: msla.cho_solve((jax.vmap(jaxmg.Cholesky)(a), True), b)  # noqa: E731
    else:
        fn = lambda sl, a, b: sl.lu_solve(sl.lu_factor(a), b, trans=2)  # noqa: E731
        mapped = lambda a, b: msla.lu_solve((jax.vmap(jaxmg.LU)(a), None), b, trans=2)  # noqa: E731
    for b_shape in [(4, 8, 3), (2, 4, 8, 3), (8,)]:
        b = rng.standard_normal(b_shape)
        want = fn(jsl, a, b)
        np.testing.assert_allclose(np.asarray(mapped(a, b)), np.asarray(want), rtol=1e-10)
        if name == "cho_solve":
            np.testing.assert_allclose(np.asarray(fn(msla, a, b)), np.asarray(want), rtol=1e-10)
    vectors = rng.standard_normal((4, 8))
    with pytest.warns(FutureWarning):
        np.testing.assert_allclose(np.asarray(mapped(a, vectors)), np.asarray(fn(jsl, a, vectors)), rtol=1e-10)
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    b = rng.standard_normal((4, 8, 3))
    a_split, b_split = put(a, mesh, P("x")), put(b, mesh, P("x"))
    one = functools.partial(fn, msla) if name == "cho_solve" else mapped
    x = jax.jit(one)(a_split, b_split)
    np.testing.assert_allclose(np.asarray(x), np.asarray(fn(jsl, a, b)), rtol=1e-10)
    if axis_type == AxisType.Explicit:
        assert same_spec(x, P("x"))
    loss = lambda f: lambda a: jnp.sum(f(a, b) ** 2)  # noqa: E731
    with jax.set_mesh(mesh):
        g = jax.jit(jax.grad(loss(one)))(a_split)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(loss(functools.partial(fn, jsl)))(a)), rtol=1e-8)


@pytest.mark.parametrize("shape,spec", [((4, 16), P(None, "i")), ((16, 4), P("i"))], ids=["wide-cols", "tall-rows"])
def test_results_of_shapes_that_a_layout_does_not_divide(shape, spec):
    """On 8 Explicit devices, a wide (4, 16) split over its 16 columns (a tall one over its rows):
    qr's square head (4, 4) and pinv's (N, M) result and derivative, whose shapes a's layout does
    not divide, are computed (replicated where a's layout does not divide them) as JAX's, not
    refused by a sharding error."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    mesh = make_mesh((8,), ("i",))
    a = put(x, mesh, spec)
    fns = {
        "qr": (lambda m, a: jnp.abs(m.qr(a)[1]), mla, jnp.linalg),
        "jaxmg.qr": (lambda m, a: jnp.abs(m.qr(a)[1]), jaxmg, jnp.linalg),
        "pinv": (lambda m, a: m.pinv(a), mla, jnp.linalg),
    }
    for name, (fn, ours, theirs) in fns.items():
        want = fn(theirs, x)
        np.testing.assert_allclose(np.asarray(fn(ours, a)), np.asarray(want), atol=1e-12, err_msg=name)
        loss = lambda a, fn=fn, m=ours: jnp.sum(jnp.sin(fn(m, a)))  # noqa: E731
        with jax.set_mesh(mesh):
            g = jax.jit(jax.grad(loss))(a)
        want_g = jax.grad(functools.partial(loss, m=theirs))(x)
        np.testing.assert_allclose(np.asarray(g), np.asarray(want_g), atol=1e-10, err_msg=name)
        assert same_spec(g, spec), (name, g.sharding.spec)


@pytest.mark.parametrize("shape,side", [((6, 4), "left"), ((4, 6), "right")])
def test_polar_of_the_shape_its_side_does_not_take_names_the_side(shape, side):
    """polar refuses a tall a on the left side (and a wide one on the right) as JAX's qdwh does,
    naming a's shape as given and the side that takes it."""
    other = "right" if side == "left" else "left"
    with pytest.raises(NotImplementedError):
        jsl.polar(jnp.ones(shape), side=side)
    with pytest.raises(NotImplementedError, match=re.escape(f"got a of shape {shape}; pass side='{other}'")):
        msla.polar(jnp.ones(shape), side=side)
