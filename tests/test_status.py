"""status = LAPACK's info on the portable backend: the first failing leading minor of a
Cholesky, the first zero pivot of LU, compared with scipy.linalg.lapack on matrices that fail
at different places; NaN outputs on failure."""

import contextlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from scipy.linalg import lapack

import jaxmg
from helpers import child_env, make_mesh, put, spd_matrix
from jaxmg.kernels import status

N = 32
FAILING = [1, 6, 21, 32]


def _not_positive_definite_at(k, dtype):
    a = spd_matrix(np.random.default_rng(k), N, dtype)
    a[k - 1, k - 1] = -50.0
    return a


def _singular_at(k):
    a = np.random.default_rng(k).standard_normal((N, N))
    a[:, k - 1] = 0.0
    return a


@pytest.mark.parametrize("k", FAILING)
@pytest.mark.parametrize("dtype,potrf", [(np.float64, lapack.dpotrf), (np.complex128, lapack.zpotrf)], ids=["d", "z"])
def test_cholesky_status_is_lapack_info(k, dtype, potrf):
    a = _not_positive_definite_at(k, dtype)
    _, info = potrf(a, lower=1)
    assert info == k
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    sharded = put(a, mesh, P("x", "y"))
    x, st = jaxmg.potrs(sharded, jnp.ones(N, dtype), return_status=True)
    assert int(st) == info and np.all(np.isnan(np.asarray(x)))
    lower, st = jaxmg.cholesky(sharded, return_status=True)
    assert int(st) == info and np.all(np.isnan(np.asarray(lower)))
    assert int(jax.jit(lambda a: jaxmg.Cholesky(a).status)(sharded)) == info


@pytest.mark.parametrize("k", FAILING)
def test_lu_status_is_the_first_zero_pivot(k):
    a = _singular_at(k)
    _, _, info = lapack.dgetrf(a)
    assert info == k
    mesh = make_mesh((4, 2), ("x", "y"))
    _, st = jaxmg.lu_solve(put(a, mesh, P("x", "y")), put(np.ones(N), mesh, P("x")), return_status=True)
    assert int(st) == info


def test_status_values_are_defined_once():
    assert status.OK == 0 and status.NOT_FINITE == -1
    assert int(status.first_bad_pivot(jnp.array([1.0, 2.0, 0.0, 0.0]))) == 3
    assert int(status.finite(jnp.array([1.0, jnp.nan]))) == status.NOT_FINITE
    assert int(status.either(jnp.int32(4), jnp.int32(-1))) == 4
    assert int(status.either(jnp.int32(0), jnp.int32(-1))) == -1


def test_success_and_vmap():
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    good = spd_matrix(np.random.default_rng(0), N, np.float64)
    stack = np.stack([good, _not_positive_definite_at(6, np.float64), _not_positive_definite_at(21, np.float64)])
    with jax.set_mesh(mesh):
        assert int(jaxmg.potrs(good, np.ones(N), return_status=True)[1]) == 0
        got = jax.jit(jax.vmap(lambda a: jaxmg.cholesky(a, return_status=True)[1]))(stack)
    assert list(np.asarray(got)) == [0, 6, 21]


# Non-finite input: NaN or Inf in a (its lower triangle, which every Hermitian
# operation reads) or in b gives, on every operation, a non-zero status (LAPACK's info where
# the factorisation stops at the bad entry, else -1) and outputs that are NaN throughout.
_RNG = np.random.default_rng(5)
_SQUARE = spd_matrix(_RNG, N, np.float64)
_TALL = _RNG.standard_normal((2 * N, N))

#: name -> (function of (square a, tall a, b of N, b of 2N), whether it takes a right-hand side)
NON_FINITE_CASES = {
    "potrs": (lambda a, t, b, tb: jaxmg.potrs(a, b, return_logdet=True, return_status=True), True),
    "cholesky": (lambda a, t, b, tb: jaxmg.cholesky(a, return_status=True), False),
    "lu_solve": (lambda a, t, b, tb: jaxmg.lu_solve(a, b, return_status=True), True),
    "least_squares": (lambda a, t, b, tb: jaxmg.least_squares(t, tb, return_status=True), True),
    "qr": (lambda a, t, b, tb: jaxmg.qr(t, return_status=True), False),
    "syevd": (lambda a, t, b, tb: jaxmg.syevd(a, return_status=True), False),
    "sygvd": (lambda a, t, b, tb: jaxmg.sygvd(a, jnp.asarray(_SQUARE), return_status=True), False),
    "gesvd": (lambda a, t, b, tb: jaxmg.gesvd(t, return_status=True), False),
    "polar": (lambda a, t, b, tb: jaxmg.polar(t, return_status=True), False),
    "Cholesky.solve": (lambda a, t, b, tb: (jaxmg.Cholesky(a).solve(b), jaxmg.Cholesky(a).status), True),
    "LU.solve": (lambda a, t, b, tb: (jaxmg.LU(a).solve(b), jaxmg.LU(a).status), True),
    "QR.q": (lambda a, t, b, tb: (jaxmg.QR(t).q, jaxmg.QR(t).r, jaxmg.QR(t).status), False),
}


def _with(x, index, value):
    x = np.array(x)
    x[index] = value
    return x


@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize(
    "name,where",
    [
        (name, where)
        for name, (_, rhs) in NON_FINITE_CASES.items()
        for where in (("a", "a-diagonal", "b") if rhs else ("a", "a-diagonal"))
    ],
)
def test_non_finite_input_gives_status_and_nan(name, where, value):
    """A module's status is its factorisation's: a bad b leaves it 0 and the solution NaN."""
    fn, _ = NON_FINITE_CASES[name]
    module = "." in name
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    a, t, b, tb = _SQUARE, _TALL, np.ones(N), np.ones(2 * N)
    if where == "a":
        a, t = _with(_with(a, (7, 2), value), (2, 7), value), _with(t, (7, 2), value)
    elif where == "a-diagonal":  # an Inf pivot: every minor stays positive, the factor is not finite
        a, t = _with(a, (7, 7), value), _with(t, (7, 7), value)
    else:
        b, tb = _with(b, 7, value), _with(tb, 7, value)
    args = (put(a, mesh, P("x", "y")), put(t, mesh, P("x", "y")), put(b, mesh, P("x")), put(tb, mesh, P("x")))
    for run in (fn, jax.jit(fn)):
        *outputs, st = run(*args)
        if where != "b":
            assert int(st) != 0, name
        else:  # the factorisation succeeds, the solution does not
            assert int(st) == (0 if module else -1), name
        for out in outputs:
            assert np.all(np.isnan(np.asarray(out))), (name, where, out)


_INFINITE_SVD_SCRIPT = """
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxmg, jaxmg.numpy.linalg as la, jaxmg.scipy.linalg as sla
a = 3 * np.eye(4) + 0.1
a[0, 0] = np.inf
tall = np.ones((6, 4))
tall[2, 1] = -np.inf
outputs = [la.svd(a), la.svd(tall.T, full_matrices=False), la.pinv(a), sla.polar(tall), la.lstsq(a, np.ones(4))[0]]
*factors, st = jaxmg.gesvd(tall, return_status=True)
assert int(st) != 0, int(st)
for x in jax.tree.leaves(outputs + factors):
    assert np.all(np.isnan(np.asarray(x))), x
print("returned")
"""


def test_svd_of_a_matrix_with_an_infinity_returns_nan_and_status():
    """The SVD on one device (LAPACK's gesdd, which does not return on a matrix with an infinity)
    is not given such a matrix: the singular vectors, pinv, the polar factors and lstsq's solution
    are NaN and gesvd's status flags it, promptly (in a child process, so that a hang fails the
    test rather than stopping the run)."""
    done = _run_child(_INFINITE_SVD_SCRIPT)
    assert done == "returned"


def _run_child(script: str, timeout: float = 120) -> str:
    """The last line that ``script`` prints in a fresh Python process, or what stopped it."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=child_env(JAX_PLATFORMS="cpu"),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"no result within {timeout} s"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else done.stderr[-2000:]


def _flagged_results(spd, general, b):
    """Every result that a failed factorisation flags, from an indefinite ``spd`` (Cholesky's
    family: status its first failing minor) and a rank-deficient ``general`` (least squares: the
    rank test; LU: an exactly zero pivot, its column 5 being zero), as one pytree (one compiled
    function per derivative mode)."""
    pencil = 2 * general  # sygvd reads its lower triangle
    return {
        "potrs": jaxmg.potrs(spd, b, return_logdet=True),
        "cholesky": jaxmg.cholesky(spd),
        "Cholesky": (lambda m: (m.solve(b), m.logdet(), m.inverse(), m.factor))(jaxmg.Cholesky(spd)),
        "sygvd": jaxmg.sygvd(pencil, spd),
        "Eigh(a, b)": (lambda m: (m.w, m.v))(jaxmg.Eigh(pencil, spd)),
        "least_squares": jaxmg.least_squares(general, b),
        "QR.solve": jaxmg.QR(general).solve(b),
        "lu_solve": jaxmg.lu_solve(general, b),
        "LU": (lambda m: (m.solve(b), m.inverse()))(jaxmg.LU(general)),
        "np.cholesky": jaxmg.numpy.linalg.cholesky(spd),
        "sp.cho_solve": jaxmg.scipy.linalg.cho_solve(jaxmg.scipy.linalg.cho_factor(spd, lower=True), b),
    }


def _flagged_inputs(batch=()):
    rng = np.random.default_rng(3)
    n = 8
    g = rng.standard_normal(batch + (n, n))
    spd = g @ np.swapaxes(g, -1, -2) + n * np.eye(n)
    general = rng.standard_normal(batch + (n, n))
    bad = (Ellipsis,) if not batch else (1,)
    spd[bad + (4, 4)] = -100.0  # not positive definite at minor 5
    general[bad + (slice(None), 3)] = 2 * general[bad + (slice(None), 1)]  # rank deficient
    general[bad + (slice(None), 5)] = 0  # singular: LU's pivot 6 is exactly zero
    return spd, general, rng.standard_normal(batch + (n,))


def _nan_where_flagged(tree, index=Ellipsis):
    """The leaves of ``tree`` (at ``index``) that are not all NaN."""
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    return [jax.tree_util.keystr(p) for p, x in leaves if not np.all(np.isnan(np.asarray(x)[index]))]


def _flagged_loss(s, g, b):
    return sum(jnp.sum(x) for x in jax.tree.leaves(_flagged_results(s, g, b)))


@pytest.mark.parametrize("axes", [None, AxisType.Auto, AxisType.Explicit], ids=["one-device", "auto", "explicit"])
def test_derivatives_of_a_flagged_result_are_nan(axes):
    """A result flagged NaN by its status has NaN derivatives, forward and reverse (never the
    finite derivative of the failed factorisation's numbers, which a training step would apply),
    on one device and on a 4 x 2 mesh of Auto or Explicit axes (the distributed route, whose
    result check is on)."""
    spd, general, b = _flagged_inputs()
    mesh = None if axes is None else make_mesh((4, 2), ("x", "y"), axis_types=axes)
    if mesh is not None:
        spd, general = (put(x, mesh, P("x", "y")) for x in (spd, general))
        b = put(b, mesh, P("x"))
    with contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh):
        primals, tangents = jax.jit(lambda s, g: jax.jvp(lambda s, g: _flagged_results(s, g, b), (s, g), (s, g)))(
            spd, general
        )
        grads = jax.jit(jax.grad(_flagged_loss, argnums=(0, 1, 2)))(spd, general, b)
    assert _nan_where_flagged(primals) == []
    assert _nan_where_flagged(tangents) == [], "finite tangents of NaN results"
    assert _nan_where_flagged(grads) == [], "finite gradients of a NaN loss"


def test_derivatives_of_a_flagged_matrix_in_a_stack_are_nan_alone():
    """Under ``jax.vmap``, the flagged matrix's gradients are NaN and the others' are their own."""
    grad = jax.grad(_flagged_loss, argnums=(0, 1, 2))
    stacked = _flagged_inputs((3,))
    grads = jax.jit(jax.vmap(grad))(*stacked)
    assert _nan_where_flagged(grads, 1) == []
    for i in (0, 2):
        assert all(np.all(np.isfinite(np.asarray(x)[i])) for x in grads)
        one = jax.jit(grad)(*(x[i] for x in stacked))
        for x, y in zip(one, grads):
            np.testing.assert_allclose(np.asarray(y)[i], np.asarray(x), rtol=1e-10)


@pytest.mark.parametrize("axes", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_derivatives_of_a_flagged_result_inside_shard_map_are_nan(axes):
    """Inside a ``jax.shard_map`` (each device's own matrices: the local route), the flagged
    matrix's gradients are NaN and every other device's are finite."""
    mesh = make_mesh((8,), ("x",), axis_types=axes)
    stacked = _flagged_inputs((8,))
    grad = jax.vmap(jax.grad(_flagged_loss, argnums=(0, 1, 2)))
    with jax.set_mesh(mesh):
        per_device = jax.shard_map(grad, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x"))
        grads = jax.jit(per_device)(*(put(x, mesh, P("x")) for x in stacked))
    assert _nan_where_flagged(grads, 1) == []
    assert all(np.all(np.isfinite(np.delete(np.asarray(x), 1, axis=0))) for x in grads)
