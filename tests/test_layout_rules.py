"""The mesh and sharding rules of distributed execution, one test (or more) per rule."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, PartitionSpec as P

import jaxmg
from helpers import child_env, make_mesh, put, random_matrix, same_spec, spd_matrix
from jaxmg import _layout, _plan

N = 32
RNG = np.random.default_rng(11)
A = spd_matrix(RNG, N, np.float64)
B = random_matrix(RNG, (N,), np.float64)
X = np.linalg.solve(A, B)


def close(x, expected=X):
    return np.allclose(np.asarray(x), expected, rtol=1e-10, atol=1e-12)


# Rule 1: one- or two-axis meshes with any names; the first axis gives process rows.
@pytest.mark.parametrize("shape", [(8, 1), (4, 2), (2, 4), (1, 8)])
def test_rule1_any_axis_names_and_grid_shapes(shape):
    mesh = make_mesh(shape, ("rows", "cols"))
    a = put(A, mesh, P("rows", "cols"))
    grid = _plan.grid_layout(None, None, [(a, "a")]).grid
    assert (grid.nprow, grid.npcol) == shape
    assert grid.row_axes == ("rows",) and grid.col_axes == ("cols",)
    assert close(jaxmg.potrs(a, put(B, mesh, P("rows"))))


def test_rule1_default_spec_follows_mesh_axis_order():
    mesh = make_mesh((2, 4), ("p", "q"))
    assert _layout.default_spec(mesh) == P("p", "q")
    assert _layout.default_spec(make_mesh((8,), ("z",))) == P("z", None)


# Rule 2: a as P(r, c), P(r), P(r, None), P(None, r); b as P(r), P(r, None), replicated.
@pytest.mark.parametrize("spec_a", [P("x"), P("x", None), P(None, "x")], ids=str)
@pytest.mark.parametrize("b_kind", ["P(r)", "P(r,None)", "replicated"])
def test_rule2_accepted_layouts(spec_a, b_kind):
    mesh = make_mesh((8,), ("x",))
    b_value = B if b_kind == "P(r)" else B[:, None]
    b_spec = {"P(r)": P("x"), "P(r,None)": P("x", None), "replicated": P()}[b_kind]
    b = put(b_value, mesh, b_spec)
    x = jaxmg.potrs(put(A, mesh, spec_a), b)
    assert x.shape == b_value.shape
    assert close(x, X if b_kind == "P(r)" else X[:, None])
    assert same_spec(x, b_spec)


TALL = random_matrix(np.random.default_rng(12), (2 * N, N), np.float64)
COLS = random_matrix(np.random.default_rng(13), (2 * N, 4), np.float64)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("b_spec", [P("x", "y"), P(None, "y")], ids=str)
@pytest.mark.parametrize("op", ["potrs", "lu_solve", "least_squares", "Cholesky.solve", "LU.solve", "QR.solve"])
def test_rule2_column_split_rhs_is_solved_and_returned_in_its_layout(op, b_spec, axis_type):
    """A b whose columns are split (as plain JAX accepts it) is solved with its columns whole,
    and the solution comes back in b's layout: eagerly, and inside jax.jit with the same values."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    tall = op in ("least_squares", "QR.solve")
    a_value, b_value = (TALL, COLS) if tall else (A, COLS[:N])
    expected = np.linalg.lstsq(a_value, b_value, rcond=None)[0]
    a, b = put(a_value, mesh, P("x", "y")), put(b_value, mesh, b_spec)
    fn = {
        "potrs": jaxmg.potrs,
        "lu_solve": jaxmg.lu_solve,
        "least_squares": jaxmg.least_squares,
        "Cholesky.solve": lambda a, b: jaxmg.Cholesky(a).solve(b),
        "LU.solve": lambda a, b: jaxmg.LU(a).solve(b),
        "QR.solve": lambda a, b: jaxmg.QR(a).solve(b),
    }[op]
    x = fn(a, b)
    assert np.allclose(np.asarray(x), expected, rtol=1e-9, atol=1e-11)
    assert same_spec(x, b_spec)
    assert np.allclose(np.asarray(jax.jit(fn)(a, b)), expected, rtol=1e-9, atol=1e-11)
    with jax.set_mesh(mesh):  # (eager reverse mode on Explicit axes needs it, for jnp too)
        grad_b = jax.grad(lambda b: jnp.sum(fn(a, b) ** 2))(b)
    assert same_spec(grad_b, b_spec)  # the cotangent comes back in b's layout


# Rule 3: mesh and specs read from a's sharding, or from jax.set_mesh, eagerly and in jit.
def test_rule3_from_sharding_eager_and_jit():
    mesh = make_mesh((4, 2), ("x", "y"))
    a, b = put(A, mesh, P("x", "y")), put(B, mesh, P("x"))
    assert close(jaxmg.potrs(a, b))
    assert close(jax.jit(jaxmg.potrs)(a, b))


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("op", ["potrs", "lu_solve", "least_squares", "vmap potrs"])
def test_rule3_mesh_from_b_when_a_has_none_eager_and_jit(op, axis_type):
    """a unsharded (NumPy), b sharded: the call runs on b's mesh, inside jax.jit too (b a jit
    argument, or placed inside the jitted function)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    tall = op == "least_squares"
    a_value, b_value = (TALL, COLS[:, 0]) if tall else (A, B)
    fn = {
        "potrs": jaxmg.potrs,
        "lu_solve": jaxmg.lu_solve,
        "least_squares": jaxmg.least_squares,
        "vmap potrs": lambda a, b: jax.vmap(jaxmg.potrs, in_axes=(None, 0))(a, b[None])[0],
    }[op]
    expected = np.linalg.lstsq(a_value, b_value, rcond=None)[0]
    b = put(b_value, mesh, P("x"))
    placed_inside = jax.jit(lambda a: fn(a, jax.device_put(jnp.asarray(b_value), b.sharding)))
    for x in (fn(a_value, b), jax.jit(fn)(a_value, b), placed_inside(a_value)):
        assert np.allclose(np.asarray(x), expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_rule3_module_solve_of_b_on_a_mesh_inside_jit(axis_type):
    """A factorisation made inside jax.jit from an a on no known mesh takes the local route (the
    device's own solver, as jnp.linalg.solve); a b sharded over a mesh is gathered for it, and
    the solution returns to b's layout where it is known (Explicit axes)."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    b = put(B, mesh, P("x"))
    x = jax.jit(lambda a, b: jaxmg.Cholesky(a).solve(b))(A, b)
    assert close(x)
    if axis_type == AxisType.Explicit:
        assert same_spec(x, P("x"))
    assert close(jax.jit(lambda a, b: jaxmg.Cholesky(a, mesh=mesh).solve(b))(A, b))
    assert close(jaxmg.Cholesky(A).solve(b))


def test_rule3_from_context_mesh_eager_and_jit():
    mesh = make_mesh((4, 2), ("x", "y"))
    with jax.set_mesh(mesh):
        assert close(jaxmg.potrs(jnp.asarray(A), jnp.asarray(B)))
        x = jax.jit(lambda a, b: jaxmg.potrs(a, b))(A, B)
        assert close(x)


def test_rule3_abstract_mesh_inside_jit():
    mesh = make_mesh((2, 4), ("x", "y"))

    @jax.jit
    def solve(a, b):
        grid = _plan.grid_layout(None, None, [(a, "a")]).grid
        assert not isinstance(grid.mesh, Mesh)  # only the abstract mesh exists here
        return jaxmg.potrs(a, b)

    assert close(solve(put(A, mesh, P("x", "y")), put(B, mesh, P("x"))))


# Rule 4: Auto axes inside jit: the default layout, unless matrix_specs says otherwise.
def test_rule4_auto_axes_default_and_explicit_specs():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    seen = {}

    @jax.jit
    def solve(a, b):
        seen["default"] = _plan.grid_layout(None, None, [(a, "a")]).grid.spec
        seen["chosen"] = _plan.grid_layout(None, P(None, "x"), [(a, "a")]).grid.spec
        return jaxmg.potrs(a, b), jaxmg.potrs(a, b, matrix_specs=[P(None, "x"), P("x")])

    with jax.set_mesh(mesh):
        x1, x2 = solve(put(A, mesh, P("x", "y")), put(B, mesh, P("x")))
    assert seen == {"default": P("x", "y"), "chosen": P(None, "x")}
    assert close(x1) and close(x2)
    one_axis = jax.make_mesh((8,), ("r",), axis_types=(AxisType.Auto,))
    assert _layout.default_spec(one_axis) == P("r", None)


# Rule 5: the solver's mesh need not be the context mesh.
def test_rule5_own_mesh_differs_from_context():
    context = make_mesh((8,), ("z",))
    mesh = make_mesh((4, 2), ("x", "y"), devices=jax.devices()[::-1])
    a, b = put(A, mesh, P("x", "y")), put(B, mesh, P("x"))
    with jax.set_mesh(context):
        assert close(jaxmg.potrs(a, b, mesh=mesh))
        assert close(jaxmg.potrs(A, B, mesh=mesh))
        # Inside jit, JAX requires the arguments' devices to match the context mesh's.
        same_devices = make_mesh((4, 2), ("x", "y"))
        a2, b2 = put(A, same_devices, P("x", "y")), put(B, same_devices, P("x"))
        assert close(jax.jit(lambda a, b: jaxmg.potrs(a, b, mesh=same_devices))(a2, b2))


# Rule 6: any device order inside the mesh.
@pytest.mark.parametrize("order", ["row-major", "column-major", "shuffled"])
@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (8,)])
def test_rule6_device_order(order, shape):
    devices = np.asarray(jax.devices())
    if order == "column-major":
        grid = devices.reshape(shape, order="F")
    elif order == "shuffled":
        grid = np.random.default_rng(3).permutation(devices).reshape(shape)
    else:
        grid = devices.reshape(shape)
    names = ("x", "y")[: len(shape)]
    mesh = Mesh(grid, names)
    a = put(A, mesh, P(*names) if len(shape) == 2 else P("x", None))
    assert close(jaxmg.potrs(a, put(B, mesh, P("x"))))
    L = np.asarray(jaxmg.cholesky(a))
    assert np.allclose(L, np.linalg.cholesky(A))


# Rule 7: least squares takes any right-hand-side layout on every grid shape.
@pytest.mark.parametrize("shape", [(8, 1), (4, 2), (2, 4), (1, 8)])
@pytest.mark.parametrize("b_spec", [P("x"), P("x", None), P()], ids=str)
def test_rule7_least_squares_rhs_on_every_grid(shape, b_spec):
    mesh = make_mesh(shape, ("x", "y"))
    rng = np.random.default_rng(5)
    a_value = random_matrix(rng, (64, N), np.float64)
    b_value = random_matrix(rng, (64,) if len(b_spec) == 1 else (64, 2), np.float64)
    x = jaxmg.least_squares(put(a_value, mesh, P("x", "y")), put(b_value, mesh, b_spec))
    expected = np.linalg.lstsq(a_value, b_value, rcond=None)[0]
    assert np.allclose(np.asarray(x), expected, atol=1e-10)


# Rule 8: a shard that is not a multiple of T_A is padded (to a whole number of tiles on every process).
def test_rule8_padding_plan():
    from jaxmg.kernels.native import _grid

    grid = _layout.Grid(make_mesh((4, 2), ("x", "y")), ("x",), ("y",))
    assert _grid.padded_size(32, 3, grid) == 36
    assert _grid.padded_size(32, 8, grid) == 32
    assert _grid.padded_size(20, 1024, grid) == 4096


@pytest.mark.parametrize("tile", [3, 5, 7, 1000])
def test_rule8_tile_not_dividing_shard(tile):
    mesh = make_mesh((4, 2), ("x", "y"))  # local blocks are 8 x 16
    a = put(A, mesh, P("x", "y"))
    assert close(jaxmg.potrs(a, put(B, mesh, P("x")), T_A=tile))
    assert np.allclose(np.asarray(jaxmg.cholesky(a, T_A=tile)), np.linalg.cholesky(A))


def test_auto_tile_rule():
    mesh = make_mesh((4, 2), ("x", "y"))
    grid = _layout.Grid(mesh, ("x",), ("y",))
    assert _layout.auto_tile((32, 32), grid) == 8  # local block 8 x 16
    assert _layout.auto_tile((65536, 65536), grid) == 2048  # N >= 32768: 2048 measured fastest
    assert _layout.auto_tile((16384, 16384), grid) == 1024
    assert _layout.auto_tile((24, 24), grid) == 4  # local 6 x 12 -> power of two <= 6


# Outputs keep the caller's layout, and donation is off by default.
def test_matrix_outputs_follow_callers_layout_and_inputs_survive():
    mesh = make_mesh((2, 4), ("x", "y"))
    a = put(A, mesh, P("x", "y"))
    L = jaxmg.cholesky(a)
    assert same_spec(L, P("x", "y"))
    replicated = put(A, mesh, P())
    assert jaxmg.cholesky(replicated).sharding.is_fully_replicated
    assert not a.is_deleted() and np.allclose(np.asarray(a), A)


@pytest.mark.parametrize("spec", [P("x", "y"), P("x")], ids=["rows-cols", "rows"])
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_wide_qr_factors_follow_callers_layout(axis_type, spec):
    """A wide a's q and r (QR(a).q, .r and jaxmg.qr) are both in a's layout, on Auto axes too, as
    a tall a's are; inside jit both in one layout (on Auto axes rule 4's)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    wide = RNG.standard_normal((8, 16))
    a = put(wide, mesh, spec)
    module = jaxmg.QR(a)
    for q, r in [(module.q, module.r), jaxmg.qr(a)]:
        assert same_spec(q, spec) and same_spec(r, spec), (q.sharding.spec, r.sharding.spec)
        np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), wide, atol=1e-12)
    q, r = jax.jit(jaxmg.qr)(a)
    assert same_spec(r, q.sharding.spec), (q.sharding.spec, r.sharding.spec)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_replicated_inputs_give_replicated_outputs_eagerly(axis_type):
    """Eager calls compile one program per layout: a replicated matrix or right-hand side
    must come back replicated on Auto axes too, where that program cannot read the layout."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(axis_type,) * 2)
    a, b = put(A, mesh, P()), put(B, mesh, P())
    outputs = {
        "cholesky": jaxmg.cholesky(a),
        "potrs": jaxmg.potrs(a, b),
        "lu_solve": jaxmg.lu_solve(a, b),
        "qr.q": jaxmg.qr(a)[0],
        "syevd.vectors": jaxmg.syevd(a)[1],
        "Cholesky.solve": jaxmg.Cholesky(a).solve(b),
    }
    for name, out in outputs.items():
        assert out.sharding.is_fully_replicated, (name, out.sharding)
    sharded = put(A, mesh, P("x", "y"))
    assert same_spec(jaxmg.potrs(sharded, b), P())  # b's layout, not a's rows
    assert same_spec(jaxmg.cholesky(sharded), P("x", "y"))  # the earlier compiled call is not reused
    assert close(jaxmg.potrs(a, b)) and close(jaxmg.lu_solve(a, b))


def test_donate_true_may_consume_inputs():
    mesh = make_mesh((8,), ("x",))
    a = put(A, mesh, P("x"))
    L = jaxmg.cholesky(a, donate=True)  # L has a's shape, so a's buffer can be reused
    assert np.allclose(np.asarray(L), np.linalg.cholesky(A))
    assert a.is_deleted()


def test_vmap_over_a_batch_of_systems():
    mesh = make_mesh((4, 2), ("x", "y"))
    mats = np.stack([A, A + np.eye(N)])
    rhs = np.stack([B, 2 * B])
    with jax.set_mesh(mesh):
        xs = jax.vmap(lambda a, b: jaxmg.potrs(a, b, matrix_specs=P("x", "y")))(mats, rhs)
    for k in range(2):
        assert np.allclose(np.asarray(xs[k]), np.linalg.solve(mats[k], rhs[k]))


def test_portable_backend_selected_on_cpu():
    mesh = make_mesh((8,), ("x",))
    assert jaxmg.default_backend("potrs", mesh, A.shape) == "portable"
    assert jaxmg.route("potrs", A.shape, A.dtype, mesh) == "local"
    assert close(jaxmg.potrs(put(A, mesh, P("x")), B, backend="portable"))


# Without a mesh, outputs keep the inputs' commitment, as jnp.linalg's do.
def test_no_mesh_uncommitted_inputs_give_uncommitted_outputs():
    a, b = jnp.eye(8) * 2.0, jnp.ones(8)
    assert not a.committed and not b.committed
    other = jax.device_put(jnp.ones(8), jax.devices()[3])
    x = jaxmg.potrs(a, b)
    assert not x.committed, x.sharding
    np.testing.assert_allclose(x + other, np.full(8, 1.5))  # meets an array on another device
    outputs = [
        jaxmg.lu_solve(a, b),
        jaxmg.cholesky(a),
        *jaxmg.qr(a),
        *jaxmg.syevd(a),
        jaxmg.least_squares(np.eye(8), np.ones(8)),
    ]
    assert not any(o.committed for o in outputs), [o.sharding for o in outputs]
    # committed inputs stay committed
    assert jaxmg.potrs(jax.device_put(a, jax.devices()[2]), b).committed


def test_uncommitted_outputs_use_no_deprecated_jax_name():
    """Making an eager output uncommitted names no deprecated JAX API (JAX 0.12.1 deprecates the
    class jax.sharding.SingleDeviceSharding): in a fresh process (JAX warns once per name), with
    DeprecationWarning an error, the eager call returns its uncommitted output."""
    script = (
        "import jax.numpy as jnp, jaxmg\n"
        "x = jaxmg.potrs(jnp.eye(8) * 2.0, jnp.ones(8))\n"
        "assert not x.committed, x.sharding\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", script],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
