"""jaxmg.lineax uses Lineax's public API only: no reading of Lineax's call stack, and vector
pytrees unflattened without JAX's complex-to-real cast."""

import inspect
import warnings

import jax.numpy as jnp
import numpy as np

import jaxmg.lineax as jl


def test_no_private_frames_of_lineax_are_read():
    source = inspect.getsource(jl)
    for private in ("_getframe", "f_locals", "f_back", "_linear_solve_impl"):
        assert private not in source, private


def test_mixed_pytree_unflattens_each_leaf_in_its_dtype_without_a_cast_warning():
    structure = jl._Structure.of({"r": jnp.zeros((2,), jnp.float64), "z": jnp.zeros((3,), jnp.complex128)})
    flat = jnp.asarray([1 + 5j, 2 + 6j, 3 + 1j, 4 + 2j, 5 + 3j])  # as flatten promotes the real leaf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = structure.unflatten(flat)
    assert tree["r"].dtype == jnp.float64 and tree["z"].dtype == jnp.complex128
    np.testing.assert_array_equal(tree["r"], [1.0, 2.0])
    np.testing.assert_array_equal(tree["z"], [3 + 1j, 4 + 2j, 5 + 3j])
    np.testing.assert_array_equal(structure.flatten(tree), [1, 2, 3 + 1j, 4 + 2j, 5 + 3j])


def test_solvers_take_throw_and_auto_passes_it_on():
    import lineax as lx

    op = lx.MatrixLinearOperator(jnp.eye(4), lx.positive_semidefinite_tag)
    assert jl.Auto(throw=False).select(op).throw is False
    assert jl.Auto().select(op).throw is True


def test_throw_that_is_not_a_bool_is_named(library_errors):
    """throw="no" would read as True (raise on every device): refused when the solver is made."""
    import pytest

    for solver in (jl.LU, jl.Cholesky, jl.QR, jl.Auto):
        with pytest.raises(TypeError, match="throw must be True or False"):
            solver(throw="no")
        assert solver(throw=False).throw is False


def test_auto_reads_well_posed_as_lineax(library_errors):
    """Auto(well_posed=...) as lineax.AutoLinearSolver: None and True pick the same solvers for
    square operators and solve as Lineax's; True refuses a rectangular operator; False picks the
    SVD for every operator (and assumes no full rank)."""
    import lineax as lx
    import pytest

    a = jnp.asarray(np.diag([4.0, 3.0, 2.0]) + 0.5)
    b = jnp.arange(1.0, 4.0)
    for tags, kind in (((), jl.LU), (lx.positive_semidefinite_tag, jl.Cholesky)):
        op = lx.MatrixLinearOperator(a, tags)
        for well_posed in (None, True):
            solver = jl.Auto(well_posed=well_posed)
            assert isinstance(solver.select(op), kind) and solver.assume_full_rank()
            want = lx.linear_solve(op, b, lx.AutoLinearSolver(well_posed=well_posed)).value
            np.testing.assert_allclose(lx.linear_solve(op, b, solver).value, want, rtol=1e-12)
    tall = lx.MatrixLinearOperator(jnp.ones((4, 3)))
    assert isinstance(jl.Auto().select(tall), jl.QR)
    with pytest.raises(ValueError, match=r"well_posed=True\) needs a square operator, got 4 x 3"):
        jl.Auto(well_posed=True).select(tall)
    for op in (tall, lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag)):
        assert isinstance(jl.Auto(well_posed=False).select(op), jl.SVD)
    assert not jl.Auto(well_posed=False).assume_full_rank()
    with pytest.raises(TypeError, match="well_posed must be None, True or False"):
        jl.Auto(well_posed="yes")


def test_dir_lists_the_solvers_not_the_imports():
    assert {n for n in dir(jl) if not n.startswith("_")} == set(jl.__all__) == {"Auto", "Cholesky", "LU", "QR", "SVD"}


def test_options_are_checked_when_the_solver_is_made(library_errors):
    """jl.LU(T_A="x") and jl.LU(backend="gpu") were accepted and failed at the first solve, far
    from the line that made them (as throw="no" is refused): refused when the solver is made."""
    import pytest

    for solver in (jl.LU, jl.Cholesky, jl.QR, jl.SVD, jl.Auto):
        with pytest.raises(TypeError, match="T_A must be a positive int or None"):
            solver(T_A="x")
        with pytest.raises(ValueError, match="backend must be one of"):
            solver(backend="gpu")
        with pytest.raises(TypeError, match="check must be True, False or None"):
            solver(check="no")


def test_the_result_check_is_a_solver_option(monkeypatch):
    """check=False (the distributed route's result check off, as for a call) reaches the module
    that factors the operator, for every solver and through Auto's choice; None (the default)
    leaves it to JAXMG_RESULT_CHECK."""
    import lineax as lx

    import jaxmg.modules

    made = []
    for name in ("Cholesky", "LU", "QR", "SVD"):
        kind = getattr(jaxmg.modules, name)
        original = kind.__init__
        monkeypatch.setattr(
            kind, "__init__", lambda self, *a, _init=original, **k: made.append(k["check"]) or _init(self, *a, **k)
        )
    a = jnp.asarray(np.diag([4.0, 3.0, 2.0]) + 0.5)
    b = jnp.arange(1.0, 4.0)
    for solver, tags in (
        (jl.Cholesky, lx.positive_semidefinite_tag),
        (jl.LU, ()),
        (jl.QR, ()),
        (jl.SVD, ()),
        (jl.Auto, ()),
    ):
        for check in (False, None):
            made.clear()
            x = lx.linear_solve(lx.MatrixLinearOperator(a, tags), b, solver(check=check)).value
            np.testing.assert_allclose(x, np.linalg.solve(np.asarray(a), np.asarray(b)), rtol=1e-6)
            # (a solve traced before with the same solver and shapes is Lineax's cached program)
            assert (made or check is None) and all(m is check for m in made), (solver, check, made)
    assert jl.Auto(check=False).select(lx.MatrixLinearOperator(a)) == jl.LU(check=False)


def test_a_state_of_another_solver_is_named(library_errors):
    """linear_solve(op, b, solver=jl.Cholesky(), state=jl.LU().init(...)) failed on an internal
    assertion (and ran on with python -O): the state is refused with a TypeError that names it
    and the solver whose init makes it; a Lineax solver's state too."""
    import lineax as lx
    import pytest

    a = jnp.asarray(np.diag([4.0, 3.0, 2.0]) + 0.5)
    op, b = lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag), jnp.arange(1.0, 4.0)
    states = (jl.LU().init(op, {}), jl.Cholesky().init(op, {}), lx.LU().init(op, {}))
    for solver in (jl.Cholesky(), jl.LU(), jl.QR(), jl.SVD(), jl.Auto()):
        for state in states:
            if type(state) is type(solver.init(op, {})) and (
                not hasattr(state, "factor") or type(state.factor) is type(solver.init(op, {}).factor)
            ):
                continue
            with pytest.raises(TypeError, match=rf"state.*{type(solver).__name__}\(\)\.init"):
                lx.linear_solve(op, b, solver, state=state)
