"""The two-stage eigensolver where ``jaxmg.kernels.two_stage.TWO_STAGE_ABOVE`` sends a matrix.

The table's orders come from measurement on each platform and are None until then, so here the
CPU's entry is set to a small order (and its band to 3, so that stage 1 reduces panels) for the
module, and ``qdwh.POLAR_EIGH_ABOVE``'s too, so that the SVD and polar compositions run on CPU.
Every surface that solves a Hermitian eigenproblem on one device — ``jaxmg.numpy.linalg``'s eigh,
eigvalsh, svd, svdvals and pinv, ``jaxmg.scipy.linalg``'s eigh (standard and generalized) and
polar (``jaxmg.polar``), ``jaxmg.syevd``, ``jaxmg.sygvd`` and the ``Eigh`` module — is called
eagerly on one matrix (the local route) and traced in ``jax.jit`` on a stack under ``jax.vmap``
(the batch route), eigh also inside ``jax.shard_map``; each call is shown to run the two-stage
solver (a spy on its entries counts the calls), and the results meet LAPACK's test ratios
(``hard_matrices.THRESHOLD``) on hard spectra: eagerly for every surface, and in ``jax.jit`` on
stacks for a surface of each kernel (syevd inside shard_map, sygvd, gesvd, svdvals' eigenvalues
alone, polar).
Derivatives of eigh through it are jaxmg's eigh rule (``jax.test_util.check_grads``), and a
failed solve is NaN with a status.
With the table's own entry (None) no surface calls it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

import hard_matrices as hm
import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import make_mesh, put
from jaxmg import _dispatch
from jaxmg.kernels import qdwh, two_stage
from test_hard_matrices import eigen_error, pencil_error, pinv_error, polar_error, svd_error

ABOVE, BAND = 6, 3


def _clear():
    _dispatch._compiled.cache_clear()
    jax.clear_caches()


@pytest.fixture(autouse=True, scope="module")
def _two_stage_on_cpu():
    """The CPU's entries set for the module (compiled calls cleared both ways, so that no call
    keeps the other choice)."""
    saved = two_stage.TWO_STAGE_ABOVE["cpu"], two_stage.BAND["cpu"], qdwh.POLAR_EIGH_ABOVE["cpu"]
    two_stage.TWO_STAGE_ABOVE["cpu"], two_stage.BAND["cpu"], qdwh.POLAR_EIGH_ABOVE["cpu"] = ABOVE, BAND, ABOVE
    _clear()
    yield
    two_stage.TWO_STAGE_ABOVE["cpu"], two_stage.BAND["cpu"], qdwh.POLAR_EIGH_ABOVE["cpu"] = saved
    _clear()


@pytest.fixture
def solves(monkeypatch):
    """The band widths of the two-stage solves traced from here on (eigh's and eigvalsh's entries
    spied on); compiled calls are cleared first, so that every call is traced again."""
    calls: list = []

    def spy(entry):
        def counted(a, band, *args):
            calls.append(band)
            return entry(a, band, *args)

        return counted

    monkeypatch.setattr(two_stage, "eigh_of_lower", spy(two_stage.eigh_of_lower))
    monkeypatch.setattr(two_stage, "_values", spy(two_stage._values))
    _clear()
    return calls


# --- inputs: hard spectra, not exactly Hermitian --------------------------------------------


def _sym(x):
    return (x + np.conj(np.swapaxes(x, -1, -2))) / 2


def _lower(x):
    return np.vectorize(hm.hermitian_of_lower, signature="(n,n)->(n,n)")(x)


def _perturbed(a, seed):
    """a plus a perturbation of its strict upper triangle of a few eps (not exactly Hermitian)."""
    noise = np.triu(hm.rhs(a.shape[-1], a.shape[-1], a.dtype, seed), 1)
    return (a + 4 * hm.eps(a.dtype) * np.max(np.abs(a)) * noise).astype(a.dtype)


def _hermitian(n, dtype, kinds=("clustered-small",)):
    """Hermitian matrices of ``kinds`` (indefinite), perturbed: (len(kinds), n, n), or (n, n) for one."""
    out = np.stack([_perturbed(hm.matrix(k, n, n, dtype, "hermitian", seed=n), n) for k in kinds])
    return out[0] if len(kinds) == 1 else out


def _pencil(n, dtype, kinds=("geometric-1e7",)):
    a = _hermitian(n, dtype, kinds)
    b = np.stack([hm.matrix("geometric-1e2", n, n, dtype, "spd", seed=n + 1) for _ in kinds])
    return a, (b[0] if len(kinds) == 1 else b)


def _general(m, n, dtype, kinds=("rank-deficient",)):
    out = np.stack([hm.matrix(k, m, n, dtype, seed=m + n) for k in kinds])
    return out[0] if len(kinds) == 1 else out


# --- the surfaces: (call, the matrix it reads, the ratios of its outputs) ---------------------


def _eigen(reads, values_only=False):
    def check(inputs, out, dtype):
        a = reads(inputs[0])
        if values_only:
            return {
                "eigenvalues": hm.value_error(out[0], np.linalg.eigvalsh(hm.wide(a)), hm.norm1(a), a.shape[0], dtype)
            }
        return eigen_error(a, out[0], out[1], dtype)

    return check


def _module(m):
    return m.w, m.v


EIGEN = {
    "numpy.eigh": (lambda a: tuple(la.eigh(a)), _eigen(_sym)),
    "numpy.eigvalsh": (lambda a: (la.eigvalsh(a),), _eigen(_sym, values_only=True)),
    "scipy.eigh": (lambda a: tuple(sla.eigh(a)), _eigen(_sym)),
    "syevd": (lambda a: tuple(jaxmg.syevd(a)), _eigen(_lower)),
    "Eigh": (lambda a: _module(jaxmg.Eigh(a)), _eigen(_lower)),
}
PENCIL = {
    "scipy.eigh-pencil": (lambda a, b: tuple(sla.eigh(a, b)), lambda i, o, d: pencil_error(*map(_sym, i), *o, d)),
    "sygvd": (lambda a, b: tuple(jaxmg.sygvd(a, b)), lambda i, o, d: pencil_error(*map(_lower, i), *o, d)),
}


def _svdvals_check(inputs, out, dtype):
    a = inputs[0]
    return {
        "values": hm.value_error(out[0], np.linalg.svd(hm.wide(a), compute_uv=False), hm.norm1(a), max(a.shape), dtype)
    }


SINGULAR = {
    "numpy.svd": (lambda a: tuple(la.svd(a, full_matrices=False)), lambda i, o, d: svd_error(i[0], *o, d)),
    "numpy.svdvals": (lambda a: (la.svdvals(a),), _svdvals_check),
    "numpy.pinv": (lambda a: (la.pinv(a),), lambda i, o, d: pinv_error(i[0], o[0], d)),
    "scipy.polar": (lambda a: tuple(sla.polar(a)), lambda i, o, d: polar_error(i[0], *o, d)),
}
SURFACES = {**EIGEN, **PENCIL, **SINGULAR}
#: The spectra of the stacks (one matrix of each).
STACK_KINDS = ("clustered-small", "graded-rows")


def _inputs(name, dtype, kinds):
    """The surface's inputs, at an order of its own (so that no two surfaces share a compiled call)."""
    n = 8 + list(SURFACES).index(name)
    if name in PENCIL:
        return _pencil(n, dtype, kinds)
    if name in SINGULAR:
        return (_general(n + 4, n, dtype, kinds),)  # tall
    return (_hermitian(n, dtype, kinds),)


def _at(x, i: int, stack: bool):
    return np.asarray(x)[i] if stack else np.asarray(x)


def _assert_ratios(name, inputs, outputs, dtype):
    check = SURFACES[name][1]
    stack = np.ndim(inputs[0]) == 3
    for i in range(np.shape(inputs[0])[0] if stack else 1):
        ratios = check([_at(x, i, stack) for x in inputs], [_at(x, i, stack) for x in outputs], dtype)
        bad = {k: v for k, v in ratios.items() if not v <= hm.THRESHOLD}
        assert not bad, f"{name} (matrix {i}): {ratios}"


# --- the tests -------------------------------------------------------------------------------


def test_table_reader_by_platform_and_order():
    assert two_stage.two_stage_band("cpu", (ABOVE + 1, ABOVE + 1)) == BAND
    assert two_stage.two_stage_band("cpu", (2, ABOVE, ABOVE)) is None  # at the order: the platform's own
    assert two_stage.two_stage_band("cpu", (5, 5)) is None
    assert two_stage.two_stage_band("cpu", (2, 40, 40)) == BAND
    assert two_stage.two_stage_above("gpu") is None and two_stage.two_stage_band("gpu", (4096, 4096)) is None


@pytest.mark.parametrize("name", list(SURFACES))
def test_every_surface_runs_two_stage_eagerly_on_one_matrix(name, solves):
    dtype = np.float64
    inputs = _inputs(name, dtype, ("clustered-small",) if name in EIGEN else ("geometric-1e7",))
    outputs = SURFACES[name][0](*inputs)
    assert solves and set(solves) == {BAND}, f"{name} did not run the two-stage solver: {solves}"
    _assert_ratios(name, inputs, outputs, dtype)


def test_every_surface_traces_two_stage_in_jit_on_a_stack_under_vmap(solves):
    """Each surface in jax.jit of jax.vmap over a stack (the batch route): one two-stage solve
    traced a surface (compiled and run by the next test, a surface of each kernel)."""
    for count, name in enumerate(SURFACES, 1):
        jax.make_jaxpr(jax.jit(jax.vmap(SURFACES[name][0])))(*_inputs(name, np.complex128, ("zero", "repeated")))
        assert len(solves) == count and set(solves) == {BAND}, (name, solves)


#: A surface of each kernel the batch route reaches (sygvd; gesvd, whose eigh is syevd's; the
#: eigenvalues alone of svdvals; polar); syevd's in jit: the shard_map test below.
KERNELS = (("sygvd",), ("numpy.svd", "numpy.svdvals", "scipy.polar"))


@pytest.mark.parametrize("names", KERNELS, ids=["sygvd", "svd-svdvals-polar"])
def test_two_stage_in_jit_on_a_stack_under_vmap_meets_lapack_ratios(names, solves):
    dtype = np.complex128
    singular = names[0] in SINGULAR
    inputs = {
        name: _inputs(name, dtype, ("rank-deficient", "graded-cols") if singular else STACK_KINDS) for name in names
    }

    @jax.jit
    def run(inputs):
        return {name: jax.vmap(SURFACES[name][0])(*inputs[name]) for name in names}

    outputs = run(inputs)
    assert len(solves) == len(names) and set(solves) == {BAND}, solves
    for name in names:
        _assert_ratios(name, inputs[name], outputs[name], dtype)


def test_two_stage_inside_shard_map_on_each_devices_matrices(solves):
    """jaxmg.numpy.linalg.eigh inside a user's jax.shard_map (the local route on each device's
    own matrices), in jax.jit, on a stack split over an Explicit mesh."""
    mesh = make_mesh((2,), ("x",), devices=jax.devices()[:2])
    a = _hermitian(ABOVE + 4, np.complex128, STACK_KINDS)
    f = jax.jit(jax.shard_map(lambda x: tuple(la.eigh(x)), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    outputs = f(put(a, mesh, P("x")))
    assert solves and set(solves) == {BAND}
    _assert_ratios("numpy.eigh", (a,), outputs, np.complex128)


def _spectral(a):
    """(w, V exp(w) V^H) of jaxmg.numpy.linalg.eigh: invariant to the eigenvectors' phases."""
    w, v = la.eigh(a)
    return w, (v * jnp.exp(w / 4).astype(v.dtype)) @ jnp.conj(v).T


@pytest.mark.parametrize("dtype", [np.complex128], ids=["complex128"])
def test_eigh_derivatives_through_two_stage(dtype, solves):
    a = jnp.asarray(_hermitian(ABOVE + 2, dtype, ("arithmetic-1e4",)))
    check_grads(_spectral, (a,), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
    assert solves and set(solves) == {BAND}


def test_a_failed_solve_is_nan_with_a_status(solves):
    a = _hermitian(ABOVE + 3, np.float64)
    a[4, 1] = np.nan
    w, v, status = jaxmg.syevd(a, return_status=True)
    assert solves and int(status) != 0 and np.all(np.isnan(w)) and np.all(np.isnan(v))


def test_default_table_runs_the_platforms_own_eigensolver(monkeypatch, solves):
    """With the table's own entry (None) no surface traces the two-stage solver; with an entry for
    another platform only, the call holds both branches and the CPU compiles LAPACK's."""
    monkeypatch.setitem(two_stage.TWO_STAGE_ABOVE, "cpu", None)
    for name, (call, _) in SURFACES.items():
        jax.make_jaxpr(call)(*_inputs(name, np.float64, ("geometric-1e7",)))
    assert solves == []
    monkeypatch.setitem(two_stage.TWO_STAGE_ABOVE, "cuda", ABOVE)
    a = _hermitian(ABOVE + 2, np.float64)
    assert "platform_index" in str(jax.make_jaxpr(jaxmg.syevd)(a))
    assert solves == [min(two_stage.BAND["cuda"], a.shape[-1] - 1)]  # traced in the branch for NVIDIA GPUs
    assert "lapack_dsyevd" in jax.jit(jaxmg.syevd).lower(a).as_text()
    _clear()


def test_info_reports_the_table():
    from jaxmg import info

    out = info.report(n=ABOVE + 1)
    assert out["local_eigh"] == {"platform": "cpu", "two_stage_above": ABOVE, "two_stage_band": BAND}
    assert f"the two-stage solver above order {ABOVE}" in info.format_report(out)
