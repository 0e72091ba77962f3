"""Inverses from the saved factor, and derivatives that are exactly those of what is computed.

* ``jaxmg.kernels.triangular``: the recursive trtri / lauum / getri against NumPy, with small
  recursion bases so that every branch runs (odd orders, both triangles, unit diagonals, views).
* ``Cholesky(a).inverse()``, ``LU(a).inverse()``, ``LU(a).slogdet()`` on Explicit and Auto meshes,
  eagerly and in jit: values, and the output in a's layout.
* ``jax.test_util.check_grads`` (forward and reverse, orders 1 and 2) of every operation and
  module method that reads one triangle, on inputs that are not Hermitian, eagerly and in jit on
  Explicit and Auto meshes; and of the LU inverse and log-determinant.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as mla
from helpers import ORDERS, make_mesh, put, random_matrix, spd_matrix
from jaxmg.kernels import triangular
from jaxmg.kernels.ffi import per_matrix

N = 8


def _lu_permutation(piv):
    perm = np.arange(len(piv))
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    return perm


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["d", "z"])
@pytest.mark.parametrize("n,base", [(1, 1), (7, 1), (19, 3)])
def test_recursive_inverses_match_lapack(n, base, dtype):
    rng = np.random.default_rng(n)
    a = spd_matrix(rng, n, dtype)
    lower = np.linalg.cholesky(a)
    junk = random_matrix(rng, (n, n), dtype)  # the other triangle is never read
    want = np.linalg.inv(a)
    inverse = jax.jit(
        lambda t, lower: triangular.hermitian_inverse(triangular.Tri(t, lower=lower), base=base), static_argnums=1
    )
    got_l = inverse(lower + np.triu(junk, 1), True)
    got_u = inverse(lower.conj().T + np.tril(junk, -1), False)
    g = random_matrix(rng, (n, n), dtype) + n * np.eye(n)
    lu, piv = scipy.linalg.lu_factor(g)
    got_g = jax.jit(lambda m, p: triangular.lu_inverse(m, p, base=base))(lu, _lu_permutation(piv))
    for got, ref in ((got_l, want), (got_u, want), (got_g, np.linalg.inv(g))):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-11, atol=1e-11 * np.abs(ref).max())
    w = jax.jit(lambda t: triangular.trtri(triangular.Tri(t, lower=False, unit=True), base=base))(lu)
    unit_upper = np.triu(lu, 1) + np.eye(n)
    np.testing.assert_allclose(np.asarray(w), np.linalg.inv(unit_upper), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.complex128, marks=pytest.mark.slow)], ids=["d", "z"])
@pytest.mark.parametrize(
    "shape",
    [(4, 2), (2, 4), pytest.param((8, 1), marks=pytest.mark.slow), pytest.param((1, 2), marks=pytest.mark.slow)],
    ids=str,
)
def test_cyclic_order_inverse_matches_lapack(shape, dtype):
    """The recursion in the cyclic order of a process grid (``jaxmg.kernels.cyclic``: local
    slices, one grid product at a time) gives LAPACK's inverse, from either triangle."""
    from jax.sharding import NamedSharding

    from jaxmg._layout import Grid
    from jaxmg.kernels import cyclic

    n = 128
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    layout = cyclic.Cyclic(Grid(mesh, ("x",), ("y",)), base=16)
    assert layout.fits(n)
    rng = np.random.default_rng(3)
    a = spd_matrix(rng, n, dtype)
    junk = np.triu(random_matrix(rng, (n, n), dtype), 1)

    def inverse(t, lower):
        with triangular.laid_out(layout):
            w = triangular.hermitian_inverse(triangular.Tri(layout.reordered(t), lower=lower), base=layout.base)
        return layout.natural(w)

    with jax.set_mesh(mesh):
        put_ = lambda x: jax.device_put(x, NamedSharding(mesh, P("x", "y")))  # noqa: E731
        run = jax.jit(inverse, static_argnums=1)
        lower = np.linalg.cholesky(a)
        got_l, got_u = run(put_(lower + junk), True), run(put_(lower.conj().T + junk.conj().T), False)
    want = np.linalg.inv(a)
    for got in (got_l, got_u):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_products_through_another_engine():
    """The kernels' products go through the products given to ``products_through`` (cuBLAS's gemm
    and trmm on one GPU), with the conjugate transposes, stored triangles and unit diagonals
    passed as flags, and give the same inverses."""
    n, base, dtype = 19, 3, np.complex128
    rng = np.random.default_rng(5)
    a = spd_matrix(rng, n, dtype)
    g = random_matrix(rng, (n, n), dtype) + n * np.eye(n)
    lu, piv = scipy.linalg.lu_factor(g)
    seen = set()

    def product(x, y, adj_x, adj_y):
        seen.add((adj_x, adj_y))
        op = lambda m, adj: jnp.conj(m).T if adj else m  # noqa: E731
        return jnp.matmul(op(x, adj_x), op(y, adj_y), precision=jax.lax.Precision.HIGHEST)

    def trmm(t, x, *, lower, adj, unit, left):
        seen.add(("trmm", lower, adj, unit, left))
        tri = jnp.tril(t) if lower else jnp.triu(t)
        if unit:
            tri = jnp.where(jnp.eye(t.shape[0], dtype=bool), 1.0, tri)
        tri = jnp.conj(tri).T if adj else tri
        return tri @ x if left else x @ tri

    def both(lower, lu, perm):
        with triangular.products_through(product, trmm):
            return (
                triangular.hermitian_inverse(triangular.Tri(lower, lower=True), base=base),
                triangular.hermitian_inverse(triangular.Tri(jnp.conj(lower).T, lower=False), base=base),
                triangular.lu_inverse(lu, perm, base=base),
            )

    got_h, got_u, got_g = jax.jit(both)(np.linalg.cholesky(a), lu, _lu_permutation(piv))
    np.testing.assert_allclose(np.asarray(got_h), np.linalg.inv(a), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got_u), np.linalg.inv(a), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got_g), np.linalg.inv(g), rtol=1e-11, atol=1e-12)
    assert {(True, False), (False, False)} <= seen, seen
    assert len([k for k in seen if k[0] == "trmm"]) >= 4, seen
    assert triangular._ENGINE.get() == (None, None, None)  # only inside the block
    mesh = make_mesh((1, 1), ("x", "y"))
    from jaxmg._layout import Grid
    from jaxmg.kernels.native.cholesky import products_on

    assert products_on(Grid(mesh, ("x",), ("y",)), 8) == (None, None, None)  # CPU: XLA's dots


def test_hermitian_inverse_through_a_one_call_engine():
    """Given an ``inverse`` engine (cuBLAS's one-call potri on one GPU), hermitian_inverse hands it
    the lower factor L, from a lower or an upper triangle (Tri(L^H, lower=False)), and no product."""
    rng = np.random.default_rng(6)
    a = spd_matrix(rng, 7, np.complex128)
    low = np.linalg.cholesky(a)
    got = []

    def inverse(l):
        got.append(np.asarray(jnp.tril(l)))
        return jnp.linalg.inv(jnp.tril(l) @ jnp.conj(jnp.tril(l)).T)

    def no_product(*args, **kwargs):
        raise AssertionError("the inverse engine replaces every product")

    with triangular.products_through(no_product, no_product, inverse):
        from_lower = triangular.hermitian_inverse(
            triangular.Tri(jnp.asarray(low + np.triu(np.ones_like(low), 1)), lower=True)
        )
        from_upper = triangular.hermitian_inverse(triangular.Tri(jnp.asarray(np.conj(low).T), lower=False))
    for inv in (from_lower, from_upper):
        np.testing.assert_allclose(np.asarray(inv), np.linalg.inv(a), rtol=1e-12, atol=1e-12)
    for l in got:
        np.testing.assert_allclose(l, low, rtol=1e-14, atol=1e-14)


def test_one_gpu_potri_derivative_rule(monkeypatch):
    """The derivative rule of jaxmg.kernels.ffi.gemm.hermitian_inverse (A^-1 from L, A = L L^H,
    L read from the lower triangle), checked with check_grads around the handler's contract: the
    handler itself (``jaxmg_potri``) runs on GPUs only, so here a reference stands in for it."""
    from jaxmg.kernels.ffi import gemm

    real_ffi_call = jax.ffi.ffi_call

    def ffi_call(target, shapes, **kwargs):
        if target != "jaxmg_potri":
            return real_ffi_call(target, shapes, **kwargs)
        assert kwargs["input_output_aliases"] == {0: 0}

        def handler(l, eye, **attrs):  # reads L's triangle only; writes A^-1 (both triangles)
            low = jnp.tril(l)
            inv = jnp.linalg.inv(low @ jnp.conj(low).T)
            hermitian = jnp.tril(inv) + jnp.conj(jnp.tril(inv, -1)).T
            return (hermitian,) + tuple(jnp.zeros(s.shape, s.dtype) for s in shapes[1:])

        return handler

    monkeypatch.setattr(jax.ffi, "ffi_call", ffi_call)
    monkeypatch.setattr(gemm._library, "register", lambda: None)
    rng = np.random.default_rng(8)
    for dtype in (np.float64, np.complex128):
        a = spd_matrix(rng, 6, dtype)
        junk = np.triu(random_matrix(rng, (6, 6), dtype), 1)  # above the factor: not read
        factor = jnp.asarray(np.linalg.cholesky(a) + junk)
        np.testing.assert_allclose(np.asarray(gemm.hermitian_inverse(factor)), np.linalg.inv(a), rtol=1e-12, atol=1e-12)
        jax.test_util.check_grads(
            lambda f: gemm.hermitian_inverse(jnp.asarray(f)), (factor,), order=2, modes=["fwd", "rev"]
        )  # check_grads passes NumPy arrays


MESHES = {
    "explicit-4x2": ((4, 2), AxisType.Explicit, P("x", "y")),
    "auto-4x2": ((4, 2), AxisType.Auto, P("x", "y")),
    "explicit-cols": ((2, 4), AxisType.Explicit, P(None, "y")),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("layout", list(MESHES))
def test_inverse_and_slogdet_from_the_saved_factor(layout, jit):
    shape, kind, spec = MESHES[layout]
    mesh = make_mesh(shape, ("x", "y"), axis_types=kind)
    rng = np.random.default_rng(3)
    a, g = spd_matrix(rng, N, np.float64), random_matrix(rng, (N, N), np.float64)
    a_s, g_s = put(a, mesh, spec), put(g, mesh, spec)

    def run(a, g):
        lu = jaxmg.LU(g)
        return jaxmg.Cholesky(a).inverse(), lu.inverse(), lu.slogdet()

    chol_inv, lu_inv, (sign, logabs) = (jax.jit(run) if jit else run)(a_s, g_s)
    np.testing.assert_allclose(np.asarray(chol_inv), np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(lu_inv), np.linalg.inv(g), rtol=1e-10, atol=1e-12)
    want_sign, want_log = np.linalg.slogdet(g)
    assert float(sign) == want_sign and np.isclose(float(logabs), want_log, rtol=1e-12)
    for x in (chol_inv, lu_inv):
        assert x.sharding.is_equivalent_to(a_s.sharding, 2), (x.sharding, a_s.sharding)


def test_complex_slogdet_and_a_singular_factor():
    rng = np.random.default_rng(4)
    g = random_matrix(rng, (N, N), np.complex128)
    sign, logabs = jaxmg.LU(g).slogdet()
    want_sign, want_log = np.linalg.slogdet(g)
    assert np.isclose(complex(sign), want_sign) and np.isclose(float(logabs), want_log)
    check_grads(lambda m: jaxmg.LU(m).slogdet()[0], (g,), order=1, modes=["fwd", "rev"])
    singular = np.ones((N, N))
    lu = jaxmg.LU(singular)
    assert int(lu.status) != 0 and np.all(np.isnan(np.asarray(lu.inverse())))


@pytest.mark.parametrize("slogdet", [lambda a: jaxmg.LU(a).slogdet()[1], lambda a: mla.slogdet(a)[1]], ids=["LU", "np"])
def test_slogdet_derivative_of_a_singular_matrix_is_nan(slogdet):
    """log|det a| of a singular matrix is -inf and has no derivative: its gradient and its
    derivative along a direction are NaN wherever a matrix of a stack is singular (as JAX's are,
    not finite numbers from the rounding of its inverse), and the others' are JAX's."""
    rng = np.random.default_rng(5)
    stack = random_matrix(rng, (3, N, N), np.float64) + 3 * np.eye(N)
    stack[1, :, 2] = 0.0  # singular: a zero column
    t = random_matrix(rng, stack.shape, np.float64)
    loss = lambda a: jnp.sum(jax.vmap(slogdet)(a))  # noqa: E731
    grad = jax.jit(jax.grad(loss))(stack)
    tangent = jax.jit(lambda a, t: jax.jvp(jax.vmap(slogdet), (a,), (t,))[1])(stack, t)
    assert np.all(np.isnan(np.asarray(grad[1]))) and np.isnan(float(tangent[1]))
    keep = np.array([0, 2])
    want = jax.grad(lambda a: jnp.sum(jnp.linalg.slogdet(a)[1]))(stack[keep])
    np.testing.assert_allclose(np.asarray(grad)[keep], np.asarray(want), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(tangent)[keep], np.sum(np.asarray(want) * t[keep], axis=(1, 2)), rtol=1e-9)


def _spd_b(a):
    """b, a function of a: positive definite as read (its lower triangle), not Hermitian."""
    return 4 * jnp.eye(N, dtype=a.dtype) + 0.05 * a


#: name -> function of a (and b): every operation and module method that reads one triangle,
#: and the LU inverse and log-determinant (full matrix).
FUNCTIONS = {
    "potrs": lambda a, b: jaxmg.potrs(a, b),
    "potrs-logdet": lambda a, b: jaxmg.potrs(a, b, return_logdet=True)[1],
    "cholesky": lambda a, b: jaxmg.cholesky(a),
    "Cholesky.solve+logdet+inverse": lambda a, b: (lambda c: (c.solve(b), c.logdet(), c.inverse()))(jaxmg.Cholesky(a)),
    "Cholesky.factor": lambda a, b: jaxmg.Cholesky(a, natural=True).factor,
    "syevd": lambda a, b: (lambda w, v: (w, jnp.abs(v) ** 2))(*jaxmg.syevd(a)),
    "sygvd": lambda a, b: jaxmg.sygvd(a, _spd_b(a), return_eigenvectors=False),
    "Eigh": lambda a, b: jaxmg.Eigh(a).w,
    "LU.inverse+slogdet": lambda a, b: (lambda f: (f.inverse(), f.slogdet()[1]))(jaxmg.LU(a)),
}
#: function -> its (mesh axis type, jit, dtype) cases: each function once or twice, so that
#: together they cover eager and jit, Explicit and Auto axes, real and complex (each case
#: compiles its own derivatives; all of them would take CI minutes).
VARIANTS = {
    "potrs": [("explicit", False, np.float64), ("auto", True, np.complex128)],
    "potrs-logdet": [("auto", True, np.float64), ("explicit", True, np.complex128)],
    "cholesky": [("explicit", True, np.float64)],
    "Cholesky.solve+logdet+inverse": [("auto", True, np.float64), ("explicit", True, np.complex128)],
    "Cholesky.factor": [("explicit", False, np.float64)],
    "syevd": [("auto", True, np.complex128)],
    "sygvd": [("explicit", True, np.float64)],
    "Eigh": [("auto", False, np.float64)],
    "LU.inverse+slogdet": [("explicit", True, np.float64), ("auto", False, np.complex128)],
}
#: (function, mesh axis type, jit, dtype)
CASES = [(name, *variant) for name, variants in VARIANTS.items() for variant in variants]


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"order{o}")
@pytest.mark.parametrize(
    "name,kind,jit,dtype",
    CASES,
    ids=[f"{c[0]}-{c[1]}-{'jit' if c[2] else 'eager'}-{np.dtype(c[3]).char}" for c in CASES],
)
def test_check_grads_on_inputs_that_are_not_hermitian(name, kind, jit, dtype, order):
    types = AxisType.Explicit if kind == "explicit" else AxisType.Auto
    mesh = make_mesh((2, 2), ("x", "y"), axis_types=types)
    rng = np.random.default_rng(11)
    a = spd_matrix(rng, N, dtype) * 4 + 0.3 * random_matrix(rng, (N, N), dtype)  # not Hermitian
    if name in ("syevd", "Eigh"):  # well separated eigenvalues
        a = a + np.diag(np.arange(N) * 3.0).astype(dtype)
    b = random_matrix(rng, (N, 2), dtype)
    fn = FUNCTIONS[name]
    f = jax.jit(fn) if jit else fn
    with jax.set_mesh(mesh):
        args = (put(a, mesh, P("x", "y")), put(b, mesh, P("x")))
        check_grads(f, args, order=order, modes=["fwd", "rev"], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["LU", "Cholesky"])
def test_second_reverse_derivative_of_the_inverse_eagerly_on_explicit_axes(module):
    """Reverse over reverse, eagerly, on Explicit axes: the inner derivative's tangent comes back
    as check_grads' unsharded cotangent and must be laid out again inside the rule."""
    mesh = make_mesh((2, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(1)
    a = spd_matrix(rng, N, np.float64) * 4 + 0.3 * random_matrix(rng, (N, N), np.float64)
    factorise = getattr(jaxmg, module)
    with jax.set_mesh(mesh):
        check_grads(
            lambda m: factorise(m).inverse(), (put(a, mesh, P("x", "y")),), order=2, modes=["rev"], atol=1e-5, rtol=1e-5
        )


_FFI_CALL = jax.ffi.ffi_call


def _emulated_library_call(target, shapes, input_layouts=None, output_layouts=None, **kwargs):
    """``jax.ffi.ffi_call`` for the one-GPU inverse handlers, computed with NumPy from their
    documented memory contract: a buffer's bytes are read and written in the layout declared for
    it (row-major unless given); ``jaxmg_potri`` reads L from the lower triangle of the
    factor's bytes taken column-major (``column_major=1``) or row-major, and leaves A^-1 there in
    that same order; ``jaxmg_getri`` takes the packed LU column-major and leaves A^-1
    column-major; ``jaxmg_relayout`` rearranges a row-major matrix as its ``mode`` says. cuSOLVER's
    ``potrf`` and ``getrf`` are LAPACK's, with the same layouts. Every other target is JAX's own
    call."""
    if not target.startswith("jaxmg_"):
        return _FFI_CALL(target, shapes, input_layouts=input_layouts, output_layouts=output_layouts, **kwargs)

    def read(value, layout):  # the bytes of ``value`` in its declared layout, as a flat array
        return np.asarray(value).T.ravel() if layout == (1, 0) else np.asarray(value).ravel()

    def written(flat, n, layout):  # the array whose declared layout reads these bytes
        return flat.reshape(n, n).T if layout == (1, 0) else flat.reshape(n, n)

    def call(factor, *operands, column_major=1, **__):
        n = factor.shape[0]
        layouts_in = list(input_layouts or [None] * (1 + len(operands)))
        layouts_out = list(output_layouts or [None] * len(shapes))
        data = read(factor, layouts_in[0])
        if target == "jaxmg_potri":
            matrix = data.reshape(n, n).T if column_major else data.reshape(n, n)
            low = np.tril(matrix)
            inverse = np.linalg.inv(low @ np.conj(low).T)
            out = inverse.T.ravel() if column_major else inverse.ravel()
        else:
            lu, perm = data.reshape(n, n).T, np.asarray(operands[0])
            a = (np.tril(lu, -1) + np.eye(n)) @ np.triu(lu)
            a_orig = np.zeros_like(a)
            a_orig[perm] = a
            out = np.linalg.inv(a_orig).T.ravel()
        result = jnp.asarray(written(out, n, layouts_out[0]), dtype=factor.dtype)
        return (result,) + tuple(jnp.zeros(s.shape, s.dtype) for s in shapes[1:])

    return call


_PER_MATRIX_CALL = per_matrix.call


def _emulated_per_matrix_call(target, shapes, *, column_major=False, input_output_aliases=None, **attributes):
    """``jaxmg.kernels.ffi.per_matrix.call`` for the one-GPU factorisations: cuSOLVER's ``potrf`` and
    ``getrf`` are LAPACK's, with the same layouts; ``jaxmg_relayout`` rearranges a row-major
    matrix as its ``mode`` says."""
    if target in ("cusolver_potrf_ffi", "cusolver_getrf_ffi"):
        from jaxlib import lapack

        def solver(x):
            lapack_attributes = {"uplo": np.uint8(ord("L"))} if "lower" in attributes else {}
            return _PER_MATRIX_CALL(
                lapack.prepare_lapack_call(target.removeprefix("cusolver_"), x.dtype),
                shapes,
                column_major=column_major,
                input_output_aliases=input_output_aliases,
                **lapack_attributes,
            )(x)

        return solver
    if target == "jaxmg_relayout":
        from jaxmg.kernels.ffi import relayout

        return lambda x: (relayout.reference(jnp.asarray(np.asarray(x)), int(attributes["mode"])),)
    return _PER_MATRIX_CALL(
        target, shapes, column_major=column_major, input_output_aliases=input_output_aliases, **attributes
    )


def _emulate_handlers(monkeypatch):
    monkeypatch.setattr(jax.ffi, "ffi_call", _emulated_library_call)
    monkeypatch.setattr(per_matrix, "call", _emulated_per_matrix_call)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_one_gpu_inverses_read_their_handlers_buffers_in_the_right_order(monkeypatch, dtype):
    """On a GPU the local route's inverses are the library's potri (on potrf's column-major
    factor) and getri (on getrf's): with each handler emulated from its memory contract, the
    Python side passes the factor's bytes in the order the handler reads and returns A^-1 itself
    (not its transpose or conjugate)."""
    from jaxmg.kernels import local
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(local, "_one_gpu_library", lambda mesh: True)
    monkeypatch.setattr(_library, "register", lambda: None)
    _emulate_handlers(monkeypatch)
    rng = np.random.default_rng(3)
    g = random_matrix(rng, (N, N), dtype) + 3 * np.eye(N)
    a = spd_matrix(rng, N, dtype)
    with jax.disable_jit():  # the emulated handlers are NumPy: values, not traced
        chol = np.asarray(jaxmg.Cholesky(jnp.asarray(a)).inverse())
        lu = np.asarray(jaxmg.LU(jnp.asarray(g)).inverse())
    np.testing.assert_allclose(chol, np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lu, np.linalg.inv(g), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_one_gpu_factorisations_read_the_relayout_buffers_in_the_right_order(monkeypatch, dtype):
    """On an NVIDIA GPU with the native library the local route rearranges a's row-major buffer in
    place before cuSOLVER's potrf and getrf read it column-major, moves the column-major factor
    into cholesky's row-major L, and transposes getri's A^-1 in place: with the GPU branch taken
    and every handler emulated from its memory contract, each result is that of the matrix given
    (whose upper triangle is not a's mirror: potrs reads the lower one)."""
    from jaxmg.kernels import local
    from jaxmg.kernels.ffi import _library, relayout

    def gpu_branch(*args, cuda=None, **_):
        return cuda(*args)

    monkeypatch.setattr(local, "_one_gpu_library", lambda mesh: True)
    monkeypatch.setattr(relayout, "available", lambda: True)
    monkeypatch.setattr(_library, "register", lambda: None)
    _emulate_handlers(monkeypatch)
    monkeypatch.setattr(jax.lax, "platform_dependent", gpu_branch)
    rng = np.random.default_rng(4)
    a = spd_matrix(rng, N, dtype)
    given = np.tril(a) + np.triu(random_matrix(rng, (N, N), dtype), 1)  # only the lower triangle is a's
    g = random_matrix(rng, (N, N), dtype) + 3 * np.eye(N)
    b = random_matrix(rng, (N, 2), dtype)
    with jax.disable_jit():  # the emulated handlers are NumPy: values, not traced
        x = np.asarray(jaxmg.potrs(jnp.asarray(given), jnp.asarray(b)))
        low = np.asarray(jaxmg.cholesky(jnp.asarray(given)))
        inv = np.asarray(jaxmg.Cholesky(jnp.asarray(given)).inverse())
        y = np.asarray(jaxmg.lu_solve(jnp.asarray(g), jnp.asarray(b)))
        lu_inv = np.asarray(jaxmg.LU(jnp.asarray(g)).inverse())
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(low, np.linalg.cholesky(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(inv, np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(y, np.linalg.solve(g, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lu_inv, np.linalg.inv(g), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_relayout_reference_modes(dtype):
    """The three rearrangements the one-GPU factorisations rely on, for a stack: a's transpose;
    the matrix whose transpose's lower triangle is a's lower triangle (what potrf reads); and the
    lower triangle of a column-major factor read row-major."""
    from jaxmg.kernels.ffi import relayout

    x = jnp.asarray(random_matrix(np.random.default_rng(5), (3, 5, 5), dtype))
    t = jnp.swapaxes(x, -1, -2)
    np.testing.assert_array_equal(relayout.reference(x, relayout.TRANSPOSE), t)
    symmetric = np.asarray(relayout.reference(x, relayout.SYMMETRIC_FROM_LOWER))
    np.testing.assert_array_equal(np.tril(np.swapaxes(symmetric, -1, -2)), np.tril(x))
    np.testing.assert_array_equal(symmetric, np.swapaxes(symmetric, -1, -2))
    np.testing.assert_array_equal(relayout.reference(t, relayout.LOWER_OF_TRANSPOSE), np.tril(x))
    with pytest.raises(ValueError, match="mode must be"):
        relayout.reference(x, 3)
