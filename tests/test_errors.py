"""Bad input fails at trace time with a TypeError or ValueError naming the argument and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxmg
from helpers import make_mesh, put, spd_matrix
from jaxmg import _layout, _plan

# Each test here checks jaxmg's own message for bad input (which jaxmg's annotations mostly reject
# too: tests/conftest.py's library_errors turns the suite's annotation checks off for them).
pytestmark = pytest.mark.usefixtures("library_errors")

N = 32
A = spd_matrix(np.random.default_rng(0), N, np.float64)
B = np.ones(N)


@pytest.fixture
def mesh():
    return make_mesh((4, 2), ("x", "y"))


def test_non_square_a(mesh):
    with pytest.raises(ValueError, match=r"a must be square"):
        jaxmg.potrs(np.ones((32, 16)), np.ones(32), mesh=mesh)
    with pytest.raises(ValueError, match=r"a must be square"):
        jaxmg.cholesky(np.ones((32, 16)), mesh=mesh)


def test_tall_required(mesh):
    with pytest.raises(ValueError, match=r"a must have at least as many rows as columns.*side='left'"):
        jaxmg.polar(np.ones((16, 32)), mesh=mesh)


WIDE = np.ones((16, 32))
SQUARE = "a must be square"
TALL = "a must have at least as many rows as columns"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda a, mesh: jaxmg.lu_solve(a, np.ones(16), mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.LU(a, mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.Cholesky(a, mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.syevd(a, mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.sygvd(a, a, mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.Eigh(a, mesh=mesh), SQUARE),
        (lambda a, mesh: jaxmg.Polar(a, mesh=mesh), TALL),
    ],
    ids=["lu_solve", "LU", "Cholesky", "syevd", "sygvd", "Eigh", "Polar"],
)
def test_functions_and_modules_take_their_familys_shape(mesh, call, match):
    """A function and the module of its family check a's shape alike: square (Cholesky, LU, the
    eigensolvers) or tall (polar); the QR and SVD families take any shape (their wide tests)."""
    with pytest.raises(ValueError, match=match):
        call(WIDE, mesh)


def test_module_flags_are_checked(mesh):
    with pytest.raises(TypeError, match=r"natural must be True or False"):
        jaxmg.Cholesky(A, mesh=mesh, natural="yes")
    with pytest.raises(TypeError, match=r"donate must be True or False"):
        jaxmg.LU(A, mesh=mesh, donate=None)
    with pytest.raises(TypeError, match=r"check must be True, False or None"):
        jaxmg.QR(A, mesh=mesh, check=1)


def test_mismatched_a_and_b(mesh):
    with pytest.raises(ValueError, match=r"b has 16 rows but a has 32"):
        jaxmg.potrs(A, np.ones(16), mesh=mesh)
    with pytest.raises(ValueError, match=r"b has shape \(16, 16\) but a has shape \(32, 32\)"):
        jaxmg.sygvd(A, np.eye(16), mesh=mesh)


def test_rank_above_two(mesh):
    with pytest.raises(ValueError, match=r"a must be a matrix \(rank 2\).*jax.vmap"):
        jaxmg.potrs(np.ones((2, N, N)), B, mesh=mesh)
    with pytest.raises(ValueError, match=r"b must be a vector \(N,\) or a matrix"):
        jaxmg.potrs(A, np.ones((N, 2, 2)), mesh=mesh)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, jnp.bfloat16, np.bool_])
def test_unsupported_dtype(mesh, dtype):
    with pytest.raises(TypeError, match=r"cholesky does not accept dtype .* \(argument a\); convert it with a.astype"):
        jaxmg.potrs(jnp.asarray(A).astype(dtype), jnp.asarray(B).astype(dtype), mesh=mesh)


@pytest.mark.parametrize("which", ["a", "b"])
def test_none_for_an_array_names_the_argument(mesh, which):
    """None where an array belongs is jaxmg's TypeError naming the argument (not jnp.asarray's
    ValueError about None)."""
    a, b = (None, B) if which == "a" else (A, None)
    with pytest.raises(TypeError, match=rf"{which} must be an array, got NoneType"):
        jaxmg.potrs(a, b, mesh=mesh)


def test_b_with_another_dtype(mesh):
    with pytest.raises(TypeError, match=r"b has dtype float32 but a has dtype float64.*b.astype"):
        jaxmg.potrs(A, B.astype(np.float32), mesh=mesh)


def test_complex_b_with_a_real_a_is_told_to_convert_both():
    """The fix for a complex b next to a real a keeps b's imaginary part: both complex."""
    message = r"b has dtype complex64 but a has dtype float32; .*convert both with \.astype\(jnp\.complex64\)"
    with pytest.raises(TypeError, match=message):
        jaxmg.lu_solve(A.astype(np.float32), B.astype(np.complex64))
    with pytest.raises(TypeError, match=message):
        jaxmg.sygvd(A.astype(np.float32), A.astype(np.complex64))


def test_b_of_an_unsupported_dtype_names_a_dtype_as_the_fix(mesh):
    """An integer b next to a float64 a: the fix is a's dtype, not float32 (which a float64 a refuses)."""
    with pytest.raises(
        TypeError, match=r"b has dtype int64 but a has dtype float64; convert b with b.astype\(a.dtype\)"
    ):
        jaxmg.lu_solve(A, np.ones(N, np.int64), mesh=mesh)
    with pytest.raises(
        TypeError, match=r"b has dtype int64 but a has dtype float64; convert b with b.astype\(a.dtype\)"
    ):
        jaxmg.Cholesky(A, mesh=mesh).solve(np.ones(N, np.int64))


def _weak(value, shape):
    """A weakly typed array (the type of a Python scalar), as ``jnp.full(shape, value)`` gives."""
    x = jnp.full(shape, value)
    assert x.weak_type
    return x


def test_weakly_typed_inputs_take_the_matrix_dtype():
    """A weakly typed b (jnp.full(n, 1.0): float64 with x64 on) next to a float32 a is read in a's
    dtype, as JAX reads it; a weakly typed matrix factors by LU (its pivots stay int32)."""
    a32 = jnp.asarray(A, jnp.float32)
    for solve in (jaxmg.potrs, jaxmg.lu_solve, jaxmg.least_squares, jax.jit(jaxmg.lu_solve)):
        x = solve(a32, _weak(1.0, N))
        assert x.dtype == jnp.float32
        np.testing.assert_allclose(x, np.linalg.solve(A, B), rtol=1e-4)
    a = _weak(0.5, (N, N)).at[jnp.arange(N), jnp.arange(N)].add(float(N))
    expected = np.linalg.solve(np.asarray(a), B)
    np.testing.assert_allclose(jaxmg.lu_solve(a, B), expected, rtol=1e-12)
    np.testing.assert_allclose(jaxmg.LU(a).solve(B), expected, rtol=1e-12)
    np.testing.assert_allclose(jaxmg.numpy.linalg.solve(a, B), expected, rtol=1e-12)
    np.testing.assert_allclose(jaxmg.numpy.linalg.det(a), np.linalg.det(np.asarray(a)), rtol=1e-12)


@pytest.mark.parametrize("tile", [0, -4])
def test_tile_below_one(mesh, tile):
    with pytest.raises(ValueError, match=r"T_A must be at least 1"):
        jaxmg.potrs(A, B, T_A=tile, mesh=mesh)


def test_tile_not_an_int(mesh):
    with pytest.raises(TypeError, match=r"T_A must be a positive int"):
        jaxmg.potrs(A, B, T_A=2.5, mesh=mesh)


def test_axis_absent_from_mesh(mesh):
    with pytest.raises(ValueError, match=r"names mesh axis 'z', which the mesh does not have"):
        jaxmg.potrs(A, B, mesh=mesh, matrix_specs=P("z", "y"))
    with pytest.raises(ValueError, match=r"spec of b.*'q'"):
        jaxmg.potrs(A, B, mesh=mesh, matrix_specs=[P("x", "y"), P("q")])


def test_spec_with_more_than_two_axes():
    """A spec over three mesh axes is refused on every route; a mesh of three axes has no process
    grid (the distributed route's layout says so), while the local route, which gathers the
    matrix, runs on it."""
    mesh3 = make_mesh((2, 2, 2), ("x", "y", "z"))
    with pytest.raises(ValueError, match=r"uses 3 mesh axes.*at most two"):
        jaxmg.potrs(A, B, mesh=mesh3, matrix_specs=P(("x", "y"), "z"))
    with pytest.raises(ValueError, match=r"mesh has 3 axes.*matrix_specs"):
        _plan.grid_layout(mesh3, None, [(jnp.asarray(A), "a")])
    np.testing.assert_allclose(np.asarray(A) @ np.asarray(jaxmg.potrs(A, B, mesh=mesh3)), np.asarray(B), atol=1e-8)


def test_spec_with_too_many_entries(mesh):
    with pytest.raises(ValueError, match=r"has 3 entries but a has rank 2"):
        jaxmg.potrs(A, B, mesh=mesh, matrix_specs=P("x", "y", None))


def test_shape_not_divided_by_mesh(mesh):
    """The grid layout (distributed route) must divide the matrix, and so must a layout the
    caller asks for; the local route gathers an unsharded matrix and runs."""
    a30 = spd_matrix(np.random.default_rng(1), 30, np.float64)
    match = r"a \(shape \(30, 30\)\) has 30 rows, which the 4 devices of mesh axes \('x',\) do not divide"
    with pytest.raises(ValueError, match=match):
        _plan.grid_layout(mesh, None, [(jnp.asarray(a30), "a")])
    with pytest.raises(ValueError, match=match):
        jaxmg.potrs(a30, np.ones(30), mesh=mesh, matrix_specs=P("x", "y"))
    np.testing.assert_allclose(a30 @ np.asarray(jaxmg.potrs(a30, np.ones(30), mesh=mesh)), np.ones(30), atol=1e-8)


def test_output_not_divided_by_mesh():
    """On the distributed route an output that the grid layout does not divide is refused,
    naming it; on the local route it is returned whole."""
    from jaxmg._sharded import Rows, check_outputs

    mesh8 = make_mesh((8,), ("x",))
    with pytest.raises(ValueError, match=r"x \(shape \(4,\)\) has 4 rows.*do not divide"):
        check_outputs([Rows(P("x"))], [(4,)], jaxmg.Grid.from_spec(mesh8, P("x")), ["x"])
    a = np.random.default_rng(2).standard_normal((16, 4))
    x = jaxmg.least_squares(a, np.ones(16), mesh=mesh8, matrix_specs=[P("x"), P("x")])
    np.testing.assert_allclose(np.asarray(x), np.linalg.lstsq(a, np.ones(16), rcond=None)[0], atol=1e-10)


def test_no_mesh_anywhere_runs_on_the_arrays_device():
    """Plain single-device arrays with no mesh anywhere run on their device (a 1 x 1 grid),
    as jax.scipy's solvers do; the solution stays on that device."""
    x = jaxmg.potrs(A, B)
    assert len(x.sharding.device_set) == 1
    np.testing.assert_allclose(np.asarray(A) @ np.asarray(x), np.asarray(B), atol=1e-8)


def test_mesh_of_wrong_type():
    with pytest.raises(TypeError, match=r"mesh must be a jax.sharding.Mesh"):
        jaxmg.potrs(A, B, mesh="x")


def test_bad_matrix_specs_type(mesh):
    with pytest.raises(TypeError, match=r"matrix_specs must be a PartitionSpec"):
        jaxmg.potrs(A, B, mesh=mesh, matrix_specs="x")
    # inside jax.jit with no mesh known (the local route, where no spec is read): checked all the same
    with pytest.raises(TypeError, match=r"matrix_specs must be a PartitionSpec"):
        jax.jit(lambda a, b: jaxmg.lu_solve(a, b, matrix_specs="x"))(A, B)
    with pytest.raises(ValueError, match=r"matrix_specs has 3 entries but this operation takes 2"):
        jax.jit(lambda a, b: jaxmg.potrs(a, b, matrix_specs=[P(), P(), P()]))(A, B)


def test_bad_backend_and_flags(mesh):
    with pytest.raises(ValueError, match=r"backend must be one of"):
        jaxmg.potrs(A, B, mesh=mesh, backend="cuda")
    with pytest.raises(TypeError, match=r"return_logdet must be True or False"):
        jaxmg.potrs(A, B, mesh=mesh, return_logdet="yes")
    with pytest.raises(TypeError, match=r"donate must be True or False"):
        jaxmg.potrs(A, B, mesh=mesh, donate=None)


def test_native_backend_unavailable_on_cpu(mesh):
    with pytest.raises(RuntimeError, match=r"backend=.native. cannot run cholesky here.*backend='portable'"):
        jaxmg.potrs(put(A, mesh, P("x", "y")), B, backend="native")


def test_native_backend_without_a_mesh_on_cpu_says_it_needs_gpus():
    """Inside jax.jit (no mesh known) on CPUs the reason is the platform, not a missing mesh, which
    passing mesh= would not cure."""
    for call in (
        lambda: jax.jit(lambda a, b: jaxmg.lu_solve(a, b, backend="native"))(A, B),
        lambda: jaxmg.potrs(A, B, backend="native"),
    ):
        with pytest.raises(RuntimeError, match=r"cannot run .* here: the devices are 'cpu', .*NVIDIA GPUs.*'portable'"):
            call()


def test_errors_are_raised_at_trace_time(mesh):
    traced = jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh))
    with pytest.raises(ValueError, match=r"b has 16 rows"):
        traced.trace(jax.ShapeDtypeStruct((N, N), np.float64), jax.ShapeDtypeStruct((16,), np.float64))


def test_not_positive_definite_gives_status_and_nan(mesh):
    bad = A.copy()
    bad[5, 5] = -100.0
    x, status = jaxmg.potrs(put(bad, mesh, P("x", "y")), B, return_status=True)
    assert int(status) > 0
    assert np.isnan(np.asarray(x)).all()
    L, status = jaxmg.cholesky(put(bad, mesh, P("x", "y")), return_status=True)
    assert int(status) > 0 and np.isnan(np.asarray(L)).any()


def test_singular_lu_status(mesh):
    singular = np.ones((N, N))
    _, status = jaxmg.lu_solve(put(singular, mesh, P("x", "y")), B, return_status=True)
    assert int(status) > 0


def test_mesh_of_another_shape_inside_jit_names_mesh():
    """Eagerly a is moved to ``mesh=``; inside jax.jit it cannot be, and the error says so
    (naming ``mesh=`` and both meshes) instead of JAX's divisibility error."""
    a_host = spd_matrix(np.random.default_rng(0), 16, np.float64)
    mesh, other = make_mesh((4, 2), ("x", "y")), make_mesh((2, 4), ("p", "q"))
    a, b = put(a_host, mesh, P("x", "y")), jnp.ones(16)
    expected = np.linalg.solve(a_host, np.ones(16))
    np.testing.assert_allclose(np.asarray(jaxmg.potrs(a, b, mesh=other)), expected, rtol=1e-10)
    with pytest.raises(ValueError, match=r"mesh= is one of axes \{'p': 2, 'q': 4\}.*cannot move"):
        jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=other))(a, b)
    np.testing.assert_allclose(
        np.asarray(jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=mesh))(a, b)), expected, rtol=1e-10
    )


def test_default_backend_names_the_op_and_maps_modules(mesh):
    """default_backend takes operations, modules and families, and refuses a misspelled op."""
    for op in ("potrs", "Cholesky", "logdet", "cholesky"):
        assert jaxmg.default_backend(op, mesh, (16, 16)) == jaxmg.default_backend("potrs", mesh, (16, 16))
    assert jaxmg.default_backend("Eigh", mesh, (16, 16)) == jaxmg.default_backend("syevd", mesh, (16, 16))
    with pytest.raises(ValueError, match="op must name an operation.*'potrf'"):
        jaxmg.default_backend("potrf", mesh, (16, 16))


def test_native_unavailable_maps_operations_to_families(monkeypatch):
    """Where the native library loads, an operation name ('potrs') is its family's: no
    'family has no native kernels' for operations that have them (python -m jaxmg.info)."""
    from jaxmg import _routes
    from jaxmg.kernels import native

    monkeypatch.setattr(native, "unavailable_reason", lambda: None)
    monkeypatch.setattr(_layout, "platform", lambda mesh: "gpu")
    for op in ("potrs", "lu_solve", "least_squares", "syevd", "sygvd", "gesvd", "polar", "Cholesky"):
        assert _routes.native_unavailable(_routes.family(op), None) is None, op


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(backend="nativ"), "backend must be"),
        (dict(T_A=0), "T_A must be at least 1"),
        (dict(T_A=-3), "T_A must be at least 1"),
    ],
)
def test_ops_local_checks_backend_and_tile(mesh, kwargs, match):
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))
    a, b = put(4 * np.eye(8), mesh, P("x", "y")), put(np.ones(8), mesh, P("x"))
    step = jax.shard_map(
        lambda a, b: jaxmg.ops.local.potrs(a, b, grid=grid, **kwargs),
        mesh=mesh,
        in_specs=(P("x", "y"), P("x")),
        out_specs=(P("x"), P(), P()),
        check_vma=False,
    )
    with pytest.raises(ValueError, match=match):
        jax.jit(step)(a, b)


def test_matrix_power_names_a_non_integer_exponent():
    """As jnp.linalg.matrix_power: a TypeError that names the exponent (not Python's index error)."""
    import jaxmg.numpy.linalg as la

    with pytest.raises(TypeError, match=r"matrix_power: n \(the exponent\) must be an integer, got 2.0"):
        la.matrix_power(np.eye(3), 2.0)
    assert np.allclose(np.asarray(la.matrix_power(np.eye(3) * 2, np.int64(3))), 8 * np.eye(3))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(shape=(32,)), ValueError, r"shape must be one matrix's \(M, N\), got \(32,\)"),
        (dict(shape=(2, 32, 32)), ValueError, r"stacked=the number of matrices"),
        (dict(stacked=-1), ValueError, r"stacked must be the number of matrices"),
        (dict(dtype="int32"), TypeError, r"dtype must be a's dtype, one of float32, .*got int32"),
        (dict(mesh="x"), TypeError, r"mesh must be a jax.sharding.Mesh, got str"),
        (dict(backend="gpu"), ValueError, r"backend must be one of"),
        (dict(shape=(N, N // 2)), ValueError, r"shape must be a square matrix's \(N, N\) for 'potrs'"),
    ],
)
def test_route_names_the_argument_it_cannot_read(mesh, kwargs, error, match):
    """jaxmg.route answers for one matrix (M, N) of a dtype jaxmg factors, on a mesh, with a
    backend jaxmg has: anything else is an error that names the argument (it was answered, or
    failed on an attribute of a string)."""
    call = dict(shape=(N, N), dtype="float64", mesh=mesh) | kwargs
    with pytest.raises(error, match=match):
        jaxmg.route(
            "potrs",
            call["shape"],
            call["dtype"],
            call["mesh"],
            **{k: call[k] for k in call if k in ("stacked", "backend")},
        )
    assert jaxmg.route("potrs", (N, N), "float64", mesh) == "local"


def test_route_refuses_the_shapes_the_operation_refuses():
    """A square-only operation with a rectangular shape, polar with a wide one: the error the call
    itself would raise, not a route (it was answered "local")."""
    for op in ("potrs", "cholesky", "Cholesky", "lu_solve", "LU", "syevd", "Eigh", "sygvd"):
        with pytest.raises(ValueError, match=r"shape must be a square matrix's"):
            jaxmg.route(op, (64, 32), "float64")
    for op in ("polar", "Polar"):
        with pytest.raises(ValueError, match=r"at least as many rows as columns"):
            jaxmg.route(op, (32, 64), "float64")
    for op in ("least_squares", "qr", "gesvd", "SVD"):
        assert jaxmg.route(op, (32, 64), "float64") == "local"
    assert jaxmg.route("polar", (64, 32), "float64") == "local"


@pytest.mark.parametrize(
    "call",
    [
        lambda: jaxmg.numpy.linalg.inv([[2.0, 1.0], [1.0, 3.0]]),
        lambda: jaxmg.numpy.linalg.solve(jnp.eye(2), [1.0, 2.0]),
        lambda: jaxmg.numpy.linalg.cholesky(((2.0, 1.0), (1.0, 3.0))),
        lambda: jaxmg.scipy.linalg.lu_factor([[2.0, 1.0], [1.0, 3.0]]),
    ],
)
def test_drop_ins_refuse_lists_as_jax_does(call):
    # jnp.linalg.inv([[2., 1.], [1., 3.]]) raises "jnp.linalg.inv requires ndarray or scalar
    # arguments, got <class 'list'> at position 0."; the drop-ins raise the same class.
    with pytest.raises(TypeError, match=r"require ndarray or scalar arguments, got <class '(list|tuple)'> at position"):
        call()


def test_right_hand_sides_given_one_per_row_are_told_how_to_pass_them(mesh):
    """A (K, N) b for an N x N a (one right-hand side per row, as a stack of them is written):
    the error says to pass b.T or to map them, the way a vmapped module's solve takes them."""
    with pytest.raises(ValueError, match=r"b has 3 rows but a has 32; .*pass b\.T, or map them with jax\.vmap"):
        jaxmg.potrs(A, np.ones((3, 32)), mesh=mesh)
    stack = jax.vmap(jaxmg.Cholesky)(jnp.stack([jnp.eye(8), 2 * jnp.eye(8)]))
    with pytest.raises(ValueError, match=r"jax\.vmap\(lambda m, b: m\.solve\(b\)\)\(module, b\)"):
        stack.solve(jnp.ones((2, 8)))
