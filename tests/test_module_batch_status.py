"""A module made under jax.vmap holds one status per matrix; read outside vmap (eagerly and in
jit) or inside it, every attribute and method puts NaN in exactly the failed matrices, and the
readings agree matrix by matrix, for every module.

A stack of 16 matrices of order 8 (more matrices than rows: a status broadcast against the
trailing axes fails loudly there; with 8 it would mark a row of every matrix), with matrix 2
failing: not positive definite (Cholesky), singular (LU) or NaN (QR, Eigh, SVD, Polar; a
rank-deficient matrix has a QR factorisation, status 0, and only QR's solves flag its rank).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
from helpers import make_mesh, put, spd_matrix

COUNT, N, BAD = 16, 8, 2
RHS = np.linspace(1.0, 2.0, N)


def _reads(m):
    """Every attribute and method of module ``m`` that returns floating arrays."""
    kind = type(m).__name__
    b = jnp.asarray(RHS)
    if kind == "Cholesky":
        return dict(factor=m.factor, solve=m.solve(b), logdet=m.logdet(), inverse=m.inverse())
    if kind == "LU":
        return dict(solve=m.solve(b), transpose_solve=m.transpose_solve(b), inverse=m.inverse())
    if kind == "QR":
        return dict(solve=m.solve(b), q=m.q, r=m.r)
    if kind == "Eigh":
        return dict(w=m.w, v=m.v)
    if kind == "SVD":
        return dict(u=m.u, s=m.s, vh=m.vh)
    return dict(u_p=m.u_p, h=m.h)


def _stack(kind):
    rng = np.random.default_rng(0)
    stack = np.stack([spd_matrix(rng, N, np.float64) for _ in range(COUNT)])
    if kind == "Cholesky":
        stack[BAD] = -np.eye(N)
    elif kind == "LU":
        stack[BAD][:, 5] = 0.0
    else:
        stack[BAD][3, 3] = np.nan
    return stack


def _nan_matrices(x) -> list:
    x = np.asarray(x).reshape(COUNT, -1)
    return list(np.nonzero(np.isnan(x).any(axis=1))[0])


def _check(module, kind):
    outside = _reads(module)
    jitted = jax.jit(_reads)(module)
    inside = jax.vmap(_reads)(module)
    assert list(np.nonzero(np.asarray(module.status))[0]) == [BAD]
    for name, x in outside.items():
        assert x.shape[0] == COUNT, (kind, name, x.shape)
        for reading in (x, jitted[name], inside[name]):
            assert _nan_matrices(reading) == [BAD], (kind, name)
        np.testing.assert_allclose(np.asarray(x), np.asarray(inside[name]), rtol=1e-12, atol=1e-12, equal_nan=True)
        np.testing.assert_allclose(
            np.asarray(jitted[name]), np.asarray(inside[name]), rtol=1e-12, atol=1e-12, equal_nan=True
        )


MODULES = ["Cholesky", "LU", "QR", "Eigh", "SVD", "Polar"]


@pytest.mark.parametrize("kind", MODULES)
def test_module_made_under_vmap_reads_matrix_by_matrix(kind):
    """One device's stack (the local route)."""
    _check(jax.vmap(getattr(jaxmg, kind))(jnp.asarray(_stack(kind))), kind)


@pytest.mark.parametrize("kind", ["Cholesky", "QR"])
def test_module_made_on_a_mesh_reads_matrix_by_matrix(kind):
    """A stack sharded over a mesh (the batch route), made inside jax.jit."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    with jax.set_mesh(mesh):
        module = jax.jit(jax.vmap(getattr(jaxmg, kind)))(put(_stack(kind), mesh, P(("x", "y"))))
        assert module.route == "batch"
        _check(module, kind)


def test_lu_of_a_matrix_with_an_infinity_is_nan_and_of_a_singular_one_is_lapacks():
    """LU's packed factor and log-determinant: NaN (values and gradients) for the matrix with an
    Inf entry; for the singular one LAPACK's exact factor (finite) and ``(0, -inf)``, as
    ``jax.scipy.linalg.lu_factor`` and ``jnp.linalg.slogdet`` give; matrix by matrix, read
    outside vmap, in jit and inside vmap."""
    stack = np.stack([spd_matrix(np.random.default_rng(1), N, np.float64) for _ in range(4)])
    stack[1][:, 5] = 0.0
    stack[2][3, 2] = np.inf
    module = jax.vmap(jaxmg.LU)(jnp.asarray(stack))
    assert list(np.asarray(module.status) != 0) == [False, True, True, False]

    def reads(m):
        sign, logabsdet = m.slogdet()
        return dict(lu=m.lu, sign=sign, logabsdet=logabsdet)

    for got in (reads(module), jax.jit(reads)(module), jax.vmap(reads)(module)):
        nan = {name: list(np.isnan(np.asarray(x)).reshape(4, -1).any(axis=1)) for name, x in got.items()}
        assert nan == dict.fromkeys(got, [False, False, True, False]), nan
        np.testing.assert_array_equal(np.asarray(got["sign"])[1], 0.0)
        np.testing.assert_array_equal(np.asarray(got["logabsdet"])[1], -np.inf)
        expected = jax.scipy.linalg.lu_factor(stack[1])[0]
        np.testing.assert_allclose(np.asarray(got["lu"])[1], np.asarray(expected), rtol=1e-12)
    gradient = jax.grad(lambda a: jaxmg.LU(a).slogdet()[1])(jnp.asarray(stack[2]))
    assert np.isnan(np.asarray(gradient)).all()
