"""The drop-ins' static arguments (JAX's ``jax.jit`` static arguments of the function of the same
name: ``n``, ``ord``, ``mode``, ``lower`` ...) given traced values: refused with a ValueError naming
the argument, as JAX refuses a traced static argument, where jaxmg's function read it as a value,
failed inside with an error naming no argument, or ignored it (scipy ``eigh``'s and ``solve``'s
``lower``, which JAX refuses); given as Python values through a closure, the shapes of JAX's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.numpy.linalg as jla
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla

_A = np.random.default_rng(0).standard_normal((4, 4)) + 4 * np.eye(4)
_SPD = _A @ _A.T
_B = np.ones((4, 2))

#: (name, function of (linalg module, scipy module), arguments, the static argument given)
CASES = [
    ("np.matrix_power", lambda m, s: m.matrix_power, (_A, 3), "n"),
    ("np.svd", lambda m, s: m.svd, (_A, False), "full_matrices"),
    ("np.norm", lambda m, s: m.norm, (_A, 2), "ord"),
    ("np.cond", lambda m, s: m.cond, (_A, 2), "p"),
    ("np.pinv", lambda m, s: m.pinv, (_SPD, None, True), "hermitian"),
    ("sp.cholesky", lambda m, s: s.cholesky, (_SPD, True), "lower"),
    ("sp.cho_factor", lambda m, s: s.cho_factor, (_SPD, True), "lower"),
    ("sp.eigh", lambda m, s: s.eigh, (_SPD, None, True), "lower"),
    ("sp.solve", lambda m, s: s.solve, (_SPD, _B, True), "lower"),
    ("sp.svd", lambda m, s: s.svd, (_A, False), "full_matrices"),
    ("sp.solve_triangular", lambda m, s: s.solve_triangular, (_A, _B, 1, True), "trans"),
    ("sp.lu_solve", lambda m, s: s.lu_solve, (jsl.lu_factor(_A), _B, 1), "trans"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_traced_static_argument_is_refused_naming_it(case):
    """In a caller's jax.jit that traces the static argument, JAX's function raises ValueError and
    so does jaxmg's, naming the argument; where JAX's own function is not one compiled call
    (jax.scipy.linalg's cholesky, cho_factor, eigh, solve, svd, solve_triangular), jax.eval_shape
    with the argument given positionally fails in both, jaxmg's with the same ValueError."""
    _, pick, args, name = case
    ours, theirs = pick(la, sla), pick(jla, jsl)
    at = next(i for i, x in enumerate(args) if not hasattr(x, "shape") and x is not None and not isinstance(x, tuple))
    traced = lambda f: jax.jit(lambda x: f(*args[:at], x, *args[at + 1 :]))  # noqa: E731
    with pytest.raises(ValueError):
        traced(theirs)(args[at])
    with pytest.raises(ValueError, match=f"{name} must be a Python value"):
        traced(ours)(args[at])
    if not hasattr(theirs, "trace"):  # not a jax.jit: jax.eval_shape traces the argument
        with pytest.raises(ValueError):
            jax.eval_shape(theirs, *args)
        with pytest.raises(ValueError, match=f"{name} must be a Python value"):
            jax.eval_shape(ours, *args)


#: the cases whose outputs are JAX's arrays (jaxmg's cho_factor returns its factor module)
ARRAYS_OUT = [c for c in CASES if c[0] != "sp.cho_factor"]


@pytest.mark.parametrize("case", ARRAYS_OUT, ids=[c[0] for c in ARRAYS_OUT])
def test_static_arguments_in_a_closure_give_jaxs_shapes(case):
    """jax.eval_shape with the static arguments given as Python values (in a closure): the shapes
    and dtypes of JAX's function."""
    _, pick, args, _ = case
    arrays = [i for i, x in enumerate(args) if hasattr(x, "shape") or isinstance(x, tuple)]

    def shapes(f):
        def call(*xs):
            full = list(args)
            for i, x in zip(arrays, xs):
                full[i] = x
            return f(*full)

        out = jax.eval_shape(call, *(jax.tree.map(jnp.asarray, args[i]) for i in arrays))
        return jax.tree.map(lambda s: (s.shape, s.dtype), tuple(jax.tree.leaves(out)))

    assert shapes(pick(la, sla)) == shapes(pick(jla, jsl))
