"""The work in jaxmg's compiled programs against plain JAX's, read from the compiled HLO text.

A derivative reuses the forward pass's factor and does no more products than JAX's own rule:
the number of ``dot`` instructions and of LAPACK custom calls of ``jax.jit(jax.grad(loss))``
through jaxmg's drop-ins is at most that of the same loss through ``jnp.linalg`` (small
matrices on one device; the counts do not depend on the size). The decompositions (syevd,
gesdd, geqrf, potrf, getrf) of ``jax.grad`` and ``jax.jvp`` of the SVD family, eigh and polar
are those of the forward pass and of JAX's own function, on one matrix, a stack under
``jax.vmap`` and a matrix on a mesh. Values and derivatives are compared with JAX's elsewhere
(test_dropin_derivatives.py, test_tangent_formulas.py), and checked here where the polar
derivative changed.
"""

from __future__ import annotations

import collections
import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import make_mesh, put
from jaxmg.kernels import qdwh

_TARGET = re.compile(r'custom_call_target="(?:lapack_)?([a-z]+?)(?:_ffi)?"')
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$", re.M)


def _compiled_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def _work(text: str) -> collections.Counter:
    """The products and LAPACK calls of a compiled program: ``dot`` and each custom-call target
    (``dgetrf``, ``dtrsm``, ...)."""
    work = collections.Counter(_TARGET.findall(text))
    work["dot"] = len(re.findall(r" dot\(", text))
    return work


#: The factorisations a derivative may repeat: LAPACK's and cuSOLVER's targets (``lapack_dsyevd_ffi``,
#: ``cusolver_gesvdj_ffi``, ...) by the decomposition's name.
_DECOMPOSITION = re.compile(r'custom_call_target="[a-z_]*?[sdcz]?(syevd|heevd|gesdd|gesvd|geqrf|potrf|getrf)[a-z_]*"')


def _decompositions(fn, *args) -> collections.Counter:
    """The decompositions in ``jax.jit(fn)``'s compiled program, by name."""
    return collections.Counter(_DECOMPOSITION.findall(_compiled_text(fn, *args)))


def _computations(text: str) -> dict[str, str]:
    """Each computation's body in a compiled HLO module, by name."""
    starts = list(_COMPUTATION.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return {m.group(1): text[m.end() : end] for m, end in zip(starts, ends)}


def _matrix(shape, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(shape) + shape[-1] * np.eye(*shape))


def _svd_loss(svd, full_matrices):
    def loss(a):
        u, s, vh = svd(a, full_matrices=full_matrices)
        return jnp.sum(u[:, : s.shape[0]] ** 3) + jnp.sum(s) + jnp.sum(vh**3)

    return loss


def _qr_loss(qr):
    def loss(a):
        q, r = qr(a)
        return jnp.sum(q**3) + jnp.sum(r**3)

    return loss


CASES = {
    "qr tall": (_qr_loss(la.qr), _qr_loss(jnp.linalg.qr), (24, 16)),
    "qr square": (_qr_loss(la.qr), _qr_loss(jnp.linalg.qr), (16, 16)),
    "qr r tall": (
        lambda a: jnp.sum(la.qr(a, mode="r") ** 3),
        lambda a: jnp.sum(jnp.linalg.qr(a, mode="r") ** 3),
        (24, 16),
    ),
    "qr r wide": (
        lambda a: jnp.sum(la.qr(a, mode="r") ** 3),
        lambda a: jnp.sum(jnp.linalg.qr(a, mode="r") ** 3),
        (16, 24),
    ),
    "svd square": (_svd_loss(la.svd, False), _svd_loss(jnp.linalg.svd, False), (16, 16)),
    "svd square full": (_svd_loss(la.svd, True), _svd_loss(jnp.linalg.svd, True), (16, 16)),
    "svd tall": (_svd_loss(la.svd, False), _svd_loss(jnp.linalg.svd, False), (24, 16)),
    "slogdet": (lambda a: la.slogdet(a)[1], lambda a: jnp.linalg.slogdet(a)[1], (16, 16)),
    "solve": (lambda a: jnp.sum(la.solve(a, a[0])), lambda a: jnp.sum(jnp.linalg.solve(a, a[0])), (16, 16)),
    "cholesky": (
        lambda a: jnp.sum(la.cholesky(a @ a.T) ** 3),
        lambda a: jnp.sum(jnp.linalg.cholesky(a @ a.T) ** 3),
        (16, 16),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_does_no_more_work_than_jax(name):
    """jax.grad through the drop-in: no more products and LAPACK calls than through jnp.linalg
    (the QR rule solves with r rather than forming r^-1 and a product; the SVD rule of a square
    matrix has no (I - U U^H) projection and no identity products for full_matrices)."""
    ours, theirs, shape = CASES[name]
    a = _matrix(shape)
    mine, jax_work = _work(_compiled_text(jax.grad(ours), a)), _work(_compiled_text(jax.grad(theirs), a))
    assert all(mine[k] <= jax_work[k] for k in mine | jax_work), (mine, jax_work)


#: R alone, each call of it on a stack of matrices or one: the drop-ins and the functional QR
R_ALONE = {
    "numpy": lambda a: la.qr(a, mode="r"),
    "scipy": lambda a: sla.qr(a, mode="r")[0],
    "functional": lambda a: jaxmg.qr(a, mode="r") if a.ndim == 2 else jax.vmap(lambda m: jaxmg.qr(m, mode="r"))(a),
}


@pytest.mark.parametrize("shape", [(24, 16), (16, 24), (3, 24, 16), (3, 16, 24)], ids=str)
@pytest.mark.parametrize("name", R_ALONE)
def test_r_alone_forms_no_q(name, shape):
    """qr(mode="r") compiles to one Householder factorisation (geqrf) and no product of its
    reflectors (orgqr / ungqr: Q), as JAX's own: tall and wide, one matrix and a stack, real and
    complex; its derivative forms Q once, as JAX's does."""
    for dtype in (np.float64, np.complex128):
        a = jnp.stack([_matrix(shape[-2:], k) for k in range(shape[0])]) if len(shape) == 3 else _matrix(shape)
        a = a.astype(dtype)
        work = _work(_compiled_text(R_ALONE[name], a))
        assert work["dgeqrf"] + work["zgeqrf"] == 1 and not any("gqr" in k for k in work), (dtype, work)
        grad = _work(_compiled_text(jax.grad(lambda a: jnp.sum(jnp.abs(R_ALONE[name](a)) ** 2)), a))
        assert sum(n for k, n in grad.items() if "gqr" in k) == 1, (dtype, grad)


def test_r_alone_forms_no_q_eagerly(monkeypatch):
    """An eager qr(mode="r") (a first call, and one whose matrix is above the drop-ins' program
    size: jaxmg's own compiled call alone) compiles jaxmg's call with geqrf and no orgqr: Q is
    neither returned nor formed."""
    from jaxmg import _dispatch

    texts: list[str] = []

    def spy(*key):  # jaxmg's compiled call, its compiled text kept
        f = _dispatch._jitted(*key)
        return lambda *xs: (texts.append(f.lower(*xs).compile().as_text()), f(*xs))[1]

    _dispatch._compiled.cache_clear()
    monkeypatch.setattr(_dispatch._compiled, "_jit", spy)
    monkeypatch.setattr(_dispatch, "PROGRAM_MAX_BYTES", 0)
    try:
        for a in (_matrix((24, 16)), _matrix((16, 24))):
            texts.clear()
            np.testing.assert_array_equal(np.asarray(la.qr(a, mode="r")), np.asarray(jnp.linalg.qr(a, mode="r")))
            work = _work("".join(texts))
            assert work["dgeqrf"] >= 1 and work["dorgqr"] == 0, work
    finally:
        monkeypatch.undo()
        _dispatch._compiled.cache_clear()


def test_tall_full_svd_gradient_slices_rather_than_multiplies():
    """The rule of a tall svd(full_matrices=True) (which JAX does not differentiate) takes u's
    leading columns by a slice, not a product with an identity: two products more than the
    reduced SVD's rule (u^H a' V and the rotation of u's extra columns)."""
    a = _matrix((24, 16))
    full = _work(_compiled_text(jax.grad(_svd_loss(la.svd, True)), a))
    reduced = _work(_compiled_text(jax.grad(_svd_loss(la.svd, False)), a))
    assert full["dot"] <= reduced["dot"] + 2 * 2, (full, reduced)  # forward and transposed pass


def test_det_gradient_solves_for_the_cofactor_only_when_singular():
    """grad(det) runs one branch: the adjugate from the packed factor (two triangular solves, as
    many as JAX's rule needs at most) or, for an exactly singular matrix, the cofactor's solves;
    no triangular solve runs outside that branch."""
    text = _compiled_text(jax.grad(la.det), _matrix((16, 16)))
    branches = re.findall(r"conditional\([^\n]*branch_computations=\{([^}]*)\}", text)
    assert branches, "no conditional in grad(det)"
    names = {name.strip().lstrip("%") for name in branches[0].split(",")}
    bodies = _computations(text)
    outside = sum(_work(body)["trsm"] for name, body in bodies.items() if name not in names)
    inside = sorted(_work(bodies[name])["trsm"] for name in names)
    jax_trsm = _work(_compiled_text(jax.grad(jnp.linalg.det), _matrix((16, 16))))["trsm"]
    assert outside == 0 and inside[0] <= jax_trsm, (outside, inside, jax_trsm)


def test_det_gradient_values():
    """The branch chosen gives JAX's derivative: regular, exactly singular of corank one."""
    regular = _matrix((6, 6))
    singular = regular.at[2, :].set(0.0)  # corank one: its adjugate is not zero
    for a in (regular, singular):
        np.testing.assert_allclose(jax.grad(la.det)(a), jax.grad(jnp.linalg.det)(a), rtol=1e-10, atol=1e-10)


def _cubed(*outputs):
    """A loss of every output (the count, not the value, is what these tests read)."""
    return sum(jnp.sum(jnp.real(x) ** 3) for x in outputs)


def _pencil(eigh):
    return lambda a: _cubed(*eigh(a + a.T, a @ a.T + a.shape[0] * jnp.eye(a.shape[0])))


#: name -> (jaxmg's loss, the same loss through JAX's function, a's shape)
FAMILY = {
    "polar": (lambda a: _cubed(*sla.polar(a)), lambda a: _cubed(*jax.scipy.linalg.polar(a, method="svd")), (24, 16)),
    "svd": (lambda a: _cubed(*la.svd(a, full_matrices=False)), lambda a: _cubed(*jnp.linalg.svd(a, False)), (24, 16)),
    "svd values": (lambda a: _cubed(la.svd(a, compute_uv=False)), lambda a: _cubed(jnp.linalg.svdvals(a)), (24, 16)),
    "svdvals": (lambda a: _cubed(la.svdvals(a)), lambda a: _cubed(jnp.linalg.svdvals(a)), (16, 24)),
    "pinv": (lambda a: _cubed(la.pinv(a)), lambda a: _cubed(jnp.linalg.pinv(a)), (24, 16)),
    "lstsq": (lambda a: _cubed(la.lstsq(a, a[:, 0])[0]), lambda a: _cubed(jnp.linalg.lstsq(a, a[:, 0])[0]), (24, 16)),
    "norm 2": (lambda a: la.norm(a, 2), lambda a: jnp.linalg.norm(a, 2), (24, 16)),
    "norm nuc": (lambda a: la.norm(a, "nuc"), lambda a: jnp.linalg.norm(a, "nuc"), (24, 16)),
    "cond": (la.cond, jnp.linalg.cond, (16, 16)),
    "eigh": (lambda a: _cubed(*la.eigh(a)), lambda a: _cubed(*jnp.linalg.eigh(a)), (16, 16)),
    "eigvalsh": (lambda a: _cubed(la.eigvalsh(a)), lambda a: _cubed(jnp.linalg.eigvalsh(a)), (16, 16)),
    "eigh pencil": (_pencil(sla.eigh), _pencil(jax.scipy.linalg.eigh), (16, 16)),
}


def _derivatives(loss):
    """``jax.grad`` and ``jax.jvp`` (along a fixed direction) of ``loss``, by name."""
    return {"grad": jax.grad(loss), "jvp": lambda a: jax.jvp(loss, (a,), (jnp.ones_like(a),))[1]}


@pytest.mark.parametrize("name", FAMILY)
def test_derivatives_run_the_decompositions_of_jax(name):
    """jax.grad and jax.jvp through the drop-ins run the decompositions that JAX's own functions'
    derivatives run (one SVD, one eigendecomposition; one Cholesky factorisation more for the
    pencil): the polar derivative reuses the SVD of the forward pass rather than decomposing h."""
    ours, theirs, shape = FAMILY[name]
    a = _matrix(shape)
    for mode, derivative in _derivatives(ours).items():
        assert _decompositions(derivative, a) == _decompositions(_derivatives(theirs)[mode], a), mode


@pytest.fixture
def route(request, monkeypatch):
    """The route named by the parameter; for "qdwh", the local route's SVD and polar through
    QDWH + eigh on the CPU above order 4 (as on a GPU above 32), compiled calls cleared before
    and after."""
    from jaxmg import _dispatch

    def clear():
        _dispatch._compiled.cache_clear()
        jax.clear_caches()

    qdwh_route = request.param == "qdwh"
    if qdwh_route:
        clear()
        monkeypatch.setitem(qdwh.POLAR_EIGH_ABOVE, "cpu", 4)
    yield request.param
    if qdwh_route:
        clear()


#: functions of the polar decomposition and of the SVD, each a loss of all its outputs
POLAR_FAMILY = {
    "polar": lambda a: _cubed(*jaxmg.polar(a)),
    "Polar": lambda a: (lambda p: _cubed(p.u_p, p.h))(jaxmg.Polar(a)),
    "scipy polar": lambda a: _cubed(*sla.polar(a)),
    "svd full": lambda a: _cubed(*la.svd(a)),
    "svdvals": lambda a: _cubed(la.svdvals(a)),
}


def _on(route, loss):
    """``(loss, a)`` on ``route``: one 24 x 16 matrix, a stack of two under ``jax.vmap``, a 32 x 16
    matrix split over an Explicit (4, 2) mesh, or one matrix through QDWH + eigh."""
    a = _matrix((24, 16))
    if route == "stack":
        return (lambda x: jnp.sum(jax.vmap(loss)(x))), jnp.stack([a, 2 * a])
    if route == "mesh":
        mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
        return loss, put(np.concatenate([a, a[:8]]), mesh, P("x", "y"))
    return loss, a


#: the eigen- and singular value decompositions among :data:`_DECOMPOSITION`'s
_SPECTRAL = ("syevd", "heevd", "gesdd", "gesvd")


def _spectral(counts: collections.Counter) -> dict:
    return {k: counts[k] for k in _SPECTRAL if counts[k]}


@pytest.mark.parametrize("route", ["one", "stack", "mesh", "qdwh"], indirect=True)
@pytest.mark.parametrize("name", POLAR_FAMILY)
def test_derivatives_run_the_forward_decomposition_only(name, route):
    """jax.grad and jax.jvp run the eigen- or singular value decomposition of the forward pass and
    no other: the polar derivative takes h's eigendecomposition from the forward's SVD (or, through
    QDWH, which computes none, from the one eigh of h that also completes U_p where needed), so
    that the forward, the gradient and the tangent each run one SVD, or QDWH and one eigh (the
    derivative of svdvals: the eigh with vectors, and QDWH's Cholesky and QR steps of the forward)."""
    loss, a = _on(route, POLAR_FAMILY[name])
    with jax.set_mesh(a.sharding.mesh) if route == "mesh" else contextlib.nullcontext():
        forward = _decompositions(loss, a)
        assert sum(_spectral(forward).values()) == 1, forward
        for mode, derivative in _derivatives(loss).items():
            assert _spectral(_decompositions(derivative, a)) == _spectral(forward), mode


def _with_singular_values(s, m, dtype, seed=0):
    """An m x len(s) matrix with singular values ``s`` (random singular vectors)."""
    rng = np.random.default_rng(seed)

    def orthonormal(rows, cols):
        x = rng.standard_normal((rows, cols)) + (
            1j * rng.standard_normal((rows, cols)) if dtype == np.complex128 else 0
        )
        return np.linalg.qr(x)[0]

    n = len(s)
    return jnp.asarray((orthonormal(m, n) * s) @ orthonormal(n, n).conj().T, dtype)


#: singular values (N = 6) of a full-rank, an ill-conditioned (1e3) and a clustered matrix
KINDS = {"full": np.linspace(2.0, 1.0, 6), "ill": np.logspace(0, -3, 6), "clustered": 1 + 1e-9 * np.arange(6)}
#: check_grads' tolerance: finite differences of the second derivative of an ill-conditioned
#: matrix's polar factors (third derivatives up to 1e9) err by about 2e-4, relative
TOLERANCE = {"full": 1e-5, "ill": 1e-3, "clustered": 1e-5}


@pytest.mark.parametrize(
    "kind, rows, dtype",
    [
        ("full", 9, np.float64),
        ("full", 6, np.complex128),
        ("ill", 6, np.float64),
        ("ill", 9, np.complex128),
        ("clustered", 9, np.float64),
        ("clustered", 6, np.complex128),
    ],
)
def test_polar_derivatives_from_the_forward_factors(kind, rows, dtype):
    """The polar derivative from the forward's SVD is exact at orders 1 and 2, forward and reverse,
    on full-rank, ill-conditioned and clustered matrices, tall and square, real and complex."""
    a = _with_singular_values(KINDS[kind], rows, dtype)
    tol = TOLERANCE[kind]
    check_grads(jax.jit(lambda x: jaxmg.polar(x)), (a,), order=2, modes=("fwd", "rev"), eps=1e-6, atol=tol, rtol=tol)


@pytest.mark.parametrize("route", ["stack", "qdwh"], indirect=True)
def test_polar_derivatives_of_a_stack(route):
    """The same on a stack of the three kinds under jax.vmap (complex, tall): through the SVD,
    and through QDWH with the eigh of h that its completion shares."""
    a = jnp.stack([_with_singular_values(s, 9, np.complex128, seed=i) for i, s in enumerate(KINDS.values())])
    polar = jax.jit(jax.vmap(lambda x: sla.polar(x)))
    tol = TOLERANCE["ill"]
    check_grads(polar, (a,), order=2 if route == "stack" else 1, modes=("fwd", "rev"), eps=1e-6, atol=tol, rtol=tol)
