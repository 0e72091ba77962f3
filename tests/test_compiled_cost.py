"""The work in jaxmg's compiled programs against plain JAX's, read from the compiled HLO text.

A derivative reuses the forward pass's factor and does no more products than JAX's own rule:
the number of ``dot`` instructions and of LAPACK custom calls of ``jax.jit(jax.grad(loss))``
through jaxmg's drop-ins is at most that of the same loss through ``jnp.linalg`` (small
matrices on one device; the counts do not depend on the size). Values and derivatives are
compared with JAX's elsewhere (test_dropin_derivatives.py, test_tangent_formulas.py).
"""

from __future__ import annotations

import collections
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmg.numpy.linalg as la

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


def test_tall_full_svd_gradient_slices_rather_than_multiplies():
    """The rule of a tall svd(full_matrices=True) (which JAX does not differentiate) takes u's
    leading columns by a slice, not a product with an identity: two products more than the
    reduced SVD's rule (u^H a' V and the rotation of u's extra columns)."""
    a = _matrix((24, 16))
    full = _work(_compiled_text(jax.grad(_svd_loss(la.svd, True)), a))
    reduced = _work(_compiled_text(jax.grad(_svd_loss(la.svd, False)), a))
    assert full["dot"] <= reduced["dot"] + 2 * 2, (full, reduced)  # forward and transposed pass


def test_det_gradient_solves_for_the_cofactor_only_when_singular():
    """grad(det) runs one branch: the inverse from the saved factor (two triangular solves, as
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
