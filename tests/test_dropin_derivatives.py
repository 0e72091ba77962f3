"""The drop-ins' derivatives are JAX's: for every differentiable function of
``jaxmg.numpy.linalg`` and ``jaxmg.scipy.linalg``, with each of its options, ``jax.jvp`` at a
random tangent that is not Hermitian and ``jax.vjp`` at a random cotangent equal those of the
same call to ``jax.numpy.linalg`` / ``jax.scipy.linalg`` (float64 and complex128, eagerly and
in ``jax.jit``, batched, on a mesh).

Each case is written once as ``fn(la, sla, a, rhs)`` and run with jaxmg's modules and with
JAX's. Hermitian functions are taken at Hermitian ``a`` (where their definitions agree); outputs
defined up to a gauge (eigen- and singular vectors, Q and R) are compared through functions
that do not depend on it (projectors, the QR with positive diagonal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as mla
import jaxmg.scipy.linalg as msla
from helpers import make_mesh, put, random_matrix

JAX = (jnp.linalg, jsl)
OURS = (mla, msla)


def _projectors(v):
    """``v_k v_k^H`` for each column k: free of the columns' phases."""
    return jnp.einsum("...ik,...jk->...kij", v, jnp.conj(v))


def _eigh(out):
    w, v = out
    return w, _projectors(v)


def _svd(out):
    u, s, vh = out
    k = s.shape[-1]
    return s, jnp.einsum("...ik,...kj->...kij", u[..., :k], vh[..., :k, :]), _projectors(u[..., :k])


def _qr(out):
    """Q and R with R's diagonal made positive (the QR that is unique for full rank)."""
    q, r = out
    k = r.shape[-2]
    d = jnp.diagonal(r, axis1=-2, axis2=-1)
    phase = d / jnp.abs(d)
    return q[..., :k] * jnp.conj(phase)[..., None, :], phase[..., :, None] * r


def _cases():
    """(name, fn(la, sla, a, rhs), kind of a, shape of a)."""
    cases = [
        ("np.solve", lambda la, sla, a, r: la.solve(a, r["b"]), "general", (4, 4)),
        ("np.inv", lambda la, sla, a, r: la.inv(a), "general", (4, 4)),
        ("np.det", lambda la, sla, a, r: la.det(a), "general", (4, 4)),
        ("np.slogdet", lambda la, sla, a, r: tuple(la.slogdet(a)), "general", (4, 4)),
        ("np.svdvals", lambda la, sla, a, r: la.svdvals(a), "general", (4, 6)),
        ("np.lstsq(tall)", lambda la, sla, a, r: la.lstsq(a, r["b6"])[0], "general", (6, 4)),
        ("np.lstsq(wide)", lambda la, sla, a, r: la.lstsq(a, r["b"])[0], "general", (4, 6)),
        ("np.matrix_power(3)", lambda la, sla, a, r: la.matrix_power(a, 3), "general", (4, 4)),
        ("np.matrix_power(-2)", lambda la, sla, a, r: la.matrix_power(a, -2), "general", (4, 4)),
        ("np.tensorinv", lambda la, sla, a, r: la.tensorinv(a.reshape(2, 2, 4)), "general", (4, 4)),
        ("np.tensorsolve", lambda la, sla, a, r: la.tensorsolve(a.reshape(4, 2, 2), r["b"]), "general", (4, 4)),
        ("sp.inv", lambda la, sla, a, r: sla.inv(a), "general", (4, 4)),
        ("sp.det", lambda la, sla, a, r: sla.det(a), "general", (4, 4)),
        ("sp.lu_factor", lambda la, sla, a, r: sla.lu_factor(a)[0], "general", (4, 4)),
        ("sp.svd", lambda la, sla, a, r: _svd(sla.svd(a)), "general", (4, 4)),
        ("sp.svd(compute_uv=False)", lambda la, sla, a, r: sla.svd(a, compute_uv=False), "general", (4, 4)),
        ("sp.qr(r)", lambda la, sla, a, r: jnp.abs(sla.qr(a, mode="r")[0]), "general", (4, 4)),
        ("sp.eigh(b) in b", lambda la, sla, b, r: _eigh(sla.eigh(r["hermitian"], b)), "positive", (4, 4)),
    ]
    for upper in (False, True):
        for sym in (True, False):
            fn = lambda la, sla, a, r, u=upper, s=sym: la.cholesky(a, upper=u, symmetrize_input=s)  # noqa: E731
            cases.append((f"np.cholesky(upper={upper}, symmetrize_input={sym})", fn, "positive", (4, 4)))
    for uplo in ("L", "U"):
        for sym in (True, False):
            eigh = lambda la, sla, a, r, u=uplo, s=sym: _eigh(la.eigh(a, UPLO=u, symmetrize_input=s))  # noqa: E731
            vals = lambda la, sla, a, r, u=uplo, s=sym: la.eigvalsh(a, UPLO=u, symmetrize_input=s)  # noqa: E731
            cases.append((f"np.eigh(UPLO={uplo}, symmetrize_input={sym})", eigh, "hermitian", (4, 4)))
            cases.append((f"np.eigvalsh(UPLO={uplo}, symmetrize_input={sym})", vals, "hermitian", (4, 4)))
    for shape, full in (((4, 4), True), ((4, 4), False), ((6, 4), False), ((4, 6), False)):
        fn = lambda la, sla, a, r, f=full: _svd(la.svd(a, full_matrices=f))  # noqa: E731
        cases.append((f"np.svd{shape}(full_matrices={full})", fn, "general", shape))
    for uv in (True, False):
        fn = lambda la, sla, a, r, uv=uv: (_svd if uv else (lambda s: s))(la.svd(a, compute_uv=uv, hermitian=True))  # noqa: E731
        cases.append((f"np.svd(hermitian=True, compute_uv={uv})", fn, "indefinite", (4, 4)))
    for mode, shape in (("reduced", (4, 4)), ("complete", (4, 4)), ("reduced", (6, 4)), ("reduced", (4, 6))):
        cases.append((f"np.qr{shape}({mode})", lambda la, sla, a, r, m=mode: _qr(la.qr(a, mode=m)), "general", shape))
    cases.append(("np.qr(r)", lambda la, sla, a, r: jnp.abs(la.qr(a, mode="r")), "general", (4, 4)))
    for shape in ((6, 4), (4, 6)):  # R alone: tall, and wide (LAPACK's factor of the whole a, as JAX's)
        cases.append((f"np.qr{shape}(r)", lambda la, sla, a, r: la.qr(a, mode="r"), "general", shape))
    for mode in ("full", "economic"):
        cases.append((f"sp.qr({mode})", lambda la, sla, a, r, m=mode: _qr(sla.qr(a, mode=m)), "general", (4, 4)))
    for shape in ((4, 4), (6, 4), (4, 6)):
        cases.append((f"np.pinv{shape}", lambda la, sla, a, r: la.pinv(a), "general", shape))
    cases.append(("np.pinv(hermitian=True)", lambda la, sla, a, r: la.pinv(a, hermitian=True), "indefinite", (4, 4)))
    for p in (None, -2, 1, "fro"):
        cases.append((f"np.cond({p})", lambda la, sla, a, r, p=p: la.cond(a, p), "general", (4, 4)))
    for order in (2, -2, "nuc"):
        cases.append((f"np.norm({order})", lambda la, sla, a, r, o=order: la.norm(a, o), "general", (4, 4)))
        fn = lambda la, sla, a, r, o=order: la.matrix_norm(a, ord=o)  # noqa: E731
        cases.append((f"np.matrix_norm({order})", fn, "general", (4, 6)))
    for assume in ("gen", "sym", "her", "pos"):
        for lower in (False, True):
            kind = {"gen": "general", "pos": "positive"}.get(assume, "hermitian")
            fn = lambda la, sla, a, r, s=assume, lo=lower: sla.solve(a, _vectors(a, r), lower=lo, assume_a=s)  # noqa: E731
            cases.append((f"sp.solve(assume_a={assume}, lower={lower})", fn, kind, (4, 4)))
    for lower in (False, True):
        fn = lambda la, sla, a, r, lo=lower: sla.cho_solve(sla.cho_factor(a, lower=lo), r["b2"])  # noqa: E731
        cases.append((f"sp.cho_solve(cho_factor(lower={lower}))", fn, "positive", (4, 4)))
        fn = lambda la, sla, a, r, lo=lower: sla.cho_solve((a, lo), r["b2"])  # noqa: E731
        cases.append((f"sp.cho_solve(array factor, lower={lower})", fn, "triangular", (4, 4)))
        cases.append(
            (
                f"sp.cholesky(lower={lower})",
                lambda la, sla, a, r, lo=lower: sla.cholesky(a, lower=lo),
                "positive",
                (4, 4),
            )
        )
        for only in (False, True):
            for b in (None, "positive"):
                fn = lambda la, sla, a, r, lo=lower, o=only, b=b: (lambda out: out if o else _eigh(out))(  # noqa: E731
                    sla.eigh(a, None if b is None else r[b], lower=lo, eigvals_only=o)
                )
                cases.append((f"sp.eigh(b={b}, lower={lower}, eigvals_only={only})", fn, "hermitian", (4, 4)))
    for trans in (0, 1, 2):
        fn = lambda la, sla, a, r, t=trans: sla.lu_solve(sla.lu_factor(a), r["b2"], trans=t)  # noqa: E731
        cases.append((f"sp.lu_solve(trans={trans})", fn, "general", (4, 4)))
        for lower in (False, True):
            for unit in (False, True):
                fn = lambda la, sla, a, r, t=trans, lo=lower, u=unit: sla.solve_triangular(  # noqa: E731
                    a, r["b2"], trans=t, lower=lo, unit_diagonal=u
                )
                cases.append(
                    (f"sp.solve_triangular(trans={trans}, lower={lower}, unit={unit})", fn, "triangular", (4, 4))
                )
    for permute in (False, True):
        fn = lambda la, sla, a, r, pl=permute: sla.lu(a, permute_l=pl)[-2:]  # noqa: E731
        cases.append((f"sp.lu(permute_l={permute})", fn, "general", (4, 4)))
    for side in ("right", "left"):
        fn = lambda la, sla, a, r, s=side: sla.polar(a, side=s, method="svd")  # noqa: E731
        cases.append((f"sp.polar({side})", fn, "general", (4, 4)))
    return {name: (fn, kind, shape) for name, fn, kind, shape in cases}


CASES = _cases()


def _matrix(rng, kind, shape, dtype):
    """A well-conditioned ``a`` of ``kind``: general, Hermitian (distinct eigenvalues), Hermitian
    indefinite (distinct |eigenvalues|), positive definite or triangular-dominant."""
    x = random_matrix(rng, shape, dtype)
    n = shape[-1]
    if kind == "general":
        return x + 3 * np.eye(*shape[-2:], dtype=dtype)
    if kind == "triangular":
        return x + 4 * np.eye(n, dtype=dtype)
    h = x + np.swapaxes(x, -1, -2).conj()
    if kind == "hermitian":
        return h
    if kind == "indefinite":
        return h + np.diag([6.0, -3.0, 1.5, -0.5]).astype(dtype)
    return (x @ np.swapaxes(x, -1, -2).conj() + n * np.eye(n)).astype(dtype)


def _vectors(a, r):
    """The right-hand side ``r["b"]`` (N,) as one vector per matrix of ``a`` (..., N, N): the
    shape that ``jax.scipy.linalg.solve(assume_a="pos")`` takes for a stack."""
    return jnp.broadcast_to(r["b"], a.shape[:-1])


def _rhs(rng, dtype):
    g = lambda *shape: jnp.asarray(random_matrix(rng, shape, dtype))  # noqa: E731
    return {
        "b": g(4),
        "b2": g(4, 2),
        "b6": g(6),
        "hermitian": jnp.asarray(_matrix(rng, "hermitian", (4, 4), dtype)),
        "positive": jnp.asarray(_matrix(rng, "positive", (4, 4), dtype)),
    }


def _reference(name):
    """JAX's function that the case's derivative is compared with. ``jax.scipy.linalg.solve(...,
    assume_a="pos")``'s own reverse mode is not the transpose of its forward mode for complex
    dtypes (its ``custom_linear_solve`` is declared symmetric, and a complex Hermitian matrix is
    not), so there the reference is the derivative its forward mode defines: that of
    ``jnp.linalg.solve`` at the Hermitian ``a``."""
    fn = CASES[name][0]
    if "assume_a=pos" in name:
        return lambda la, sla, a, r: la.solve(a, _vectors(a, r)[..., None])[..., 0]
    return fn


def _derivatives(fn, a, t, ct):
    """(tangent, cotangent of a) of ``fn`` at ``a``."""
    return jax.jvp(fn, (a,), (t,))[1], jax.vjp(fn, a)[1](ct)[0]


def _compare(name, dtype, *, jit, batch=(), seed=0):
    fn, kind, shape = CASES[name]
    rng = np.random.default_rng(seed)
    r = _rhs(rng, dtype)
    a = jnp.asarray(
        np.stack([_matrix(rng, kind, shape, dtype) for _ in range(int(np.prod(batch)))]).reshape(*batch, *shape)
    )
    t = jnp.asarray(random_matrix(rng, a.shape, dtype))  # not Hermitian, not triangular
    ours = lambda a: fn(*OURS, a, r)  # noqa: E731
    theirs = lambda a: _reference(name)(*JAX, a, r)  # noqa: E731
    shapes = jax.eval_shape(theirs, a)
    ct = jax.tree.map(lambda s: jnp.asarray(random_matrix(rng, s.shape, s.dtype)), shapes)
    run = jax.jit(_derivatives, static_argnums=0) if jit else _derivatives
    got = run(ours, a, t, ct)
    want = _derivatives(theirs, a, t, ct)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-10, err_msg=name)


#: The cases whose options decide how a Hermitian matrix is read (a triangle, or symmetrized).
HERMITIAN = [n for n in CASES if any(k in n for k in ("symmetrize_input", "assume_a=pos", "cho", "eigh", "hermitian"))]


@pytest.mark.parametrize("name", list(CASES))
def test_jvp_and_vjp_equal_jax(name):
    """Every case in complex128, compiled."""
    _compare(name, np.complex128, jit=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", HERMITIAN)
def test_jvp_and_vjp_equal_jax_eagerly(name):
    """The cases of Hermitian inputs in float64, eagerly."""
    _compare(name, np.float64, jit=False)


@pytest.mark.parametrize(
    "name",
    [
        "np.eigh(UPLO=U, symmetrize_input=False)",
        "np.eigvalsh(UPLO=L, symmetrize_input=False)",
        "sp.solve(assume_a=pos, lower=False)",
    ],
)
@pytest.mark.parametrize(
    "dtype,jit", [(np.float64, True), (np.complex128, False)], ids=["float64-jit", "complex128-eager"]
)
def test_full_matrix_derivatives_batched(name, dtype, jit):
    """The drop-ins whose derivative is that of the full matrix (not of the triangle read), on a
    batch (2, 4, 4), both dtypes, eagerly and in jit."""
    _compare(name, dtype, jit=jit, batch=(2,), seed=1)


@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
def test_full_matrix_derivatives_on_a_mesh(axis_type):
    """eigh(symmetrize_input=False) and solve(assume_a="pos") of a matrix split over a 4 x 2 mesh:
    the gradient is JAX's and keeps a's layout (eagerly and in jit)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit if axis_type == "explicit" else AxisType.Auto)
    rng = np.random.default_rng(2)
    a = _matrix(rng, "positive", (16, 16), np.float64)
    b = random_matrix(rng, (16, 2), np.float64)
    weights = random_matrix(rng, (16, 16), np.float64)

    def loss(la, sla, b):
        def f(a):
            w, v = la.eigh(a, UPLO="U", symmetrize_input=False)
            x = sla.solve(a, b, assume_a="pos")
            return jnp.sum(w * jnp.arange(16)) + jnp.sum(weights * jnp.abs(v) ** 2) + jnp.sum(x**2)

        return f

    want = jax.grad(loss(*JAX, b))(a)
    # b replicated on Explicit axes, its rows split on Auto ones: x and its derivatives in b's layout
    a_s, b_s = put(a, mesh, P("x", "y")), put(b, mesh, P() if axis_type == "explicit" else P("x", None))
    with jax.set_mesh(mesh):
        for grad in (jax.grad(loss(*OURS, b_s)), jax.jit(jax.grad(loss(*OURS, b_s)))):
            got = grad(a_s)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-10)
    assert tuple(got.sharding.spec)[:1] == ("x",)


def test_full_matrix_derivatives_inside_shard_map():
    """Inside a shard_map, each device's own matrix (eigh and eigvalsh with symmetrize_input=False,
    solve(assume_a="pos") against a right-hand side every device shares): the gradient is JAX's."""
    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
    rng = np.random.default_rng(3)
    a = np.stack([_matrix(rng, "positive", (6, 6), np.float64) for _ in range(4)])
    b = random_matrix(rng, (6,), np.float64)
    weights = random_matrix(rng, (6, 6), np.float64)

    def loss(la, sla):
        def f(a):
            w = la.eigvalsh(a, UPLO="U", symmetrize_input=False)
            v = la.eigh(a, symmetrize_input=False)[1]
            return (
                jnp.sum(w * jnp.arange(6))
                + jnp.sum(weights * jnp.abs(v) ** 2)
                + jnp.sum(sla.solve(a, b, assume_a="pos"))
            )

        return f

    body = lambda a: jax.grad(loss(*OURS))(a[0])[None]  # noqa: E731
    got = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d")))(put(a, mesh, P("d")))
    want = np.stack([jax.grad(loss(*JAX))(a[k]) for k in range(4)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-10)


def test_per_matrix_gradients_of_a_stack_sharded_on_its_batch_axis():
    """``jax.jit(jax.vmap(jax.grad(f)))`` of a stack split over an Explicit mesh axis: det,
    slogdet and inv (the inverse from the LU factor: its permuted identity is batched like the
    factor) give JAX's gradients, matrix by matrix, in the stack's layout."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(4)
    stack = np.stack([_matrix(rng, "general", (5, 5), np.float64) for _ in range(8)])
    losses = {
        "det": (lambda la: la.det, jnp.linalg.det),
        "slogdet": (lambda la: lambda a: la.slogdet(a)[1], lambda a: jnp.linalg.slogdet(a)[1]),
        "inv": (lambda la: lambda a: jnp.sum(la.inv(a) ** 2), lambda a: jnp.sum(jnp.linalg.inv(a) ** 2)),
    }
    sharded = put(stack, mesh, P("x"))
    with jax.set_mesh(mesh):
        for name, (ours, theirs) in losses.items():
            got = jax.jit(jax.vmap(jax.grad(ours(mla))))(sharded)
            want = jax.vmap(jax.grad(theirs))(stack)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-10, err_msg=name)
            assert tuple(got.sharding.spec)[:1] == ("x",), name


def _second_order(fn, a, t):
    """(gradient, its derivative along ``t``, the derivative along ``t`` of ``fn``'s derivative
    along ``t``) of the real loss ``fn``."""
    grad = jax.grad(fn)
    return grad(a), jax.jvp(grad, (a,), (t,))[1], jax.jvp(lambda a: jax.jvp(fn, (a,), (t,))[1], (a,), (t,))[1]


#: Losses of a stack (..., 4, 4) through the triangular solves of the drop-ins (the device's
#: triangular solve under jax.vmap): fn(la, sla, a, b).
TRIANGULAR_LOSSES = {
    "solve_triangular": lambda la, sla, a, b: sla.solve_triangular(a, b, trans=2, lower=True),
    "lu_solve": lambda la, sla, a, b: sla.lu_solve(sla.lu_factor(a), b, trans=1),
    "lu": lambda la, sla, a, b: sla.lu(a)[2] @ b,
    "cho_solve(array factor)": lambda la, sla, a, b: sla.cho_solve((jnp.triu(a), False), b),
}


@pytest.mark.parametrize("name", list(TRIANGULAR_LOSSES))
def test_triangular_solve_derivatives_of_a_stack_split_on_its_batch_axis(name):
    """First and second derivatives of the drop-ins that solve with a triangular factor, on a stack
    split over an Explicit mesh axis (JAX's own derivative of its triangular solve fails there):
    JAX's, matrix by matrix, in jit."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(5)
    stack = np.stack([_matrix(rng, "general", (4, 4), np.complex128) for _ in range(4)])
    b = random_matrix(rng, (4, 4, 2), np.complex128)
    t = random_matrix(rng, stack.shape, np.complex128)
    fn = TRIANGULAR_LOSSES[name]

    def loss(modules, b):
        return lambda a: jnp.sum(jnp.abs(fn(*modules, a, b)) ** 2)

    want = _second_order(loss(JAX, b), stack, t)
    with jax.set_mesh(mesh):
        a_s, b_s, t_s = (put(x, mesh, P("x")) for x in (stack, b, t))
        got = jax.jit(lambda a, b, t: _second_order(loss(OURS, b), a, t))(a_s, b_s, t_s)
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-10, err_msg=name)
    assert all(tuple(x.sharding.spec)[:1] == ("x",) for x in got[:2]), name  # the matrices, per matrix


def test_lu_solve_gradients_inside_a_partially_manual_shard_map():
    """``jax.vmap`` of ``lu_solve`` inside a ``shard_map`` over one axis of an Explicit mesh (the
    other stays Explicit): the gradients with respect to the factor's matrix and to b are JAX's."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(6)
    stack = np.stack([_matrix(rng, "general", (4, 4), np.float64) for _ in range(8)])
    b = random_matrix(rng, (8, 4), np.float64)

    def loss(sla):
        solve = lambda a, b: jnp.sum(sla.lu_solve(sla.lu_factor(a), b) ** 2)  # noqa: E731
        return lambda a, b: jax.vmap(solve)(a, b)

    body = jax.shard_map(loss(msla), mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), axis_names={"x"})
    grad = jax.jit(jax.grad(lambda a, b: jnp.sum(body(a, b)), argnums=(0, 1)))
    got = grad(put(stack, mesh, P("x")), put(b, mesh, P("x")))
    want = jax.grad(lambda a, b: jnp.sum(loss(jsl)(a, b)), argnums=(0, 1))(stack, b)
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
    "name",
    [
        "np.eigh(UPLO=L, symmetrize_input=False)",
        "np.eigvalsh(UPLO=U, symmetrize_input=False)",
        "sp.solve(assume_a=pos, lower=False)",
    ],
)
def test_second_derivatives_of_the_full_matrix_rules_are_jax(name):
    """eigh and eigvalsh with symmetrize_input=False, and solve(assume_a="pos"): the gradient, its
    derivative and the second derivative along a tangent that is not Hermitian, and the whole
    Hessian (symmetric but for eigh's vectors), are those of the reference (:func:`_reference`: JAX's own function, and
    for solve(assume_a="pos") jnp.linalg.solve, whose derivatives JAX's forward mode defines),
    float64, N = 4, at a Hermitian (positive definite) ``a``."""
    fn, kind, _ = CASES[name]
    rng = np.random.default_rng(7)
    r = _rhs(rng, np.float64)
    a = jnp.asarray(_matrix(rng, kind, (4, 4), np.float64))
    t = jnp.asarray(random_matrix(rng, (4, 4), np.float64))
    weights = jnp.asarray(random_matrix(rng, (64,), np.float64))

    def loss(fn, modules):  # a weighted sum of the outputs (eigenvalues, or projectors, or x)
        return lambda a: (lambda out: jnp.sum(weights[: out.size] * out.ravel()))(
            jax.tree.leaves(fn(*modules, a, r))[-1]
        )

    got = jax.jit(_second_order, static_argnums=0)(loss(fn, OURS), a, t)
    want = _second_order(loss(_reference(name), JAX), a, t)
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-10, err_msg=name)
    hessian = np.asarray(jax.jit(jax.hessian(loss(fn, OURS)))(a)).reshape(16, 16)
    np.testing.assert_allclose(
        hessian, np.asarray(jax.hessian(loss(_reference(name), JAX))(a)).reshape(16, 16), rtol=1e-9, atol=1e-10
    )
    if "eigh(" not in name:  # JAX's eigenvector rule along a' as given is no function's derivative
        np.testing.assert_allclose(hessian, hessian.T, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", ["det", "pinv"])
def test_gradients_of_a_stack_stay_per_matrix_on_auto_axes(name):
    """``jax.grad`` of ``jax.vmap`` of det and pinv (each one compiled computation) on a stack
    split over its batch axis on Auto mesh axes, eagerly and in jit: JAX's gradients, in the
    stack's layout (whole matrices where the stack lies, not each matrix spread over the mesh)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    rng = np.random.default_rng(8)
    stack = np.stack([_matrix(rng, "general", (8, 8), np.float64) for _ in range(4)])
    weights = random_matrix(rng, (8, 8), np.float64)
    fn = {"det": lambda la: la.det, "pinv": lambda la: lambda a: jnp.sum(weights * la.pinv(a))}[name]
    loss = lambda la: lambda a: jnp.sum(jax.vmap(fn(la))(a))  # noqa: E731
    want = jax.grad(loss(jnp.linalg))(stack)
    sharded = put(stack, mesh, P("x"))
    with jax.set_mesh(mesh):
        for grad in (jax.grad(loss(mla)), jax.jit(jax.grad(loss(mla)))):
            got = grad(sharded)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-10)
            assert got.sharding.is_equivalent_to(sharded.sharding, 3), got.sharding


@pytest.mark.parametrize(
    "shape, dtype", [((4, 3), np.complex128), ((3, 4), np.complex128), ((2, 3, 4), np.float64)], ids=str
)
def test_r_alone_derivatives_to_second_order(shape, dtype):
    """qr(mode="r") (R alone, whose derivative forms Q from the same factor): check_grads of order
    2, forward and reverse, tall, wide (LAPACK's factor of the whole a) and a stack, through the
    drop-in and, for one matrix, jaxmg.qr(mode="r")."""
    a = jnp.asarray(random_matrix(np.random.default_rng(9), shape, dtype))
    check_grads(lambda x: mla.qr(x, mode="r"), (a,), order=2, modes=("fwd", "rev"))
    if len(shape) == 2:
        check_grads(lambda x: jaxmg.qr(x, mode="r"), (a,), order=2, modes=("fwd", "rev"))
