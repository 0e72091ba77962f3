"""What one call is: its checked arguments and its :class:`Plan` (route, mesh, layouts, tile).

:func:`resolve` is called once per public call, at the boundary (``jaxmg._dispatch``): it checks
the arguments (each error names the argument and the fix), finds the mesh, asks
``jaxmg._routes`` for the route, and lays the call out. The plan is static and hashable: it keys
the boundary's compiled call, and the factorisation modules keep it for their later solves.

The plan's placement helpers (:meth:`Plan.enter`, :meth:`Plan.leave`, :func:`place_rhs`) are the
only placements below the boundary, and they are trace-only:

* distributed route: matrices enter in the grid layout and leave in the caller's layout;
  right-hand sides are solved in the layout of ``jaxmg._layout.resolve_rhs``;
* local route over a mesh (a matrix sharded over it with ``backend="portable"``, or one device's
  solver measured faster): everything enters replicated (the device's solver needs whole
  matrices) and leaves in the caller's layout;
* local route on a device's own arrays, and the batch route: no placement at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from . import _checks, _context, _layout, _routes, _sharded
from ._context import MANUAL, Context, concrete_value
from ._layout import AnyMesh, Grid
from ._typing import MeshLike, Specs, Tile
from .kernels import local, native
from .kernels.families import Backend


class Options(NamedTuple):
    """The arguments that every public function and module constructor takes after its arrays and
    forwards as given: the layout (``T_A``, ``mesh``, ``matrix_specs``) and how the call runs
    (``donate``, ``backend``, and ``check``, the result check as the caller asked for it);
    ``jaxmg._docstrings``' groups ``{{layout}}`` and ``{{run}}`` describe them."""

    T_A: Tile
    mesh: MeshLike
    matrix_specs: Specs
    donate: bool
    backend: str
    check: Optional[bool]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The static description of one call.

    family: the kernel family ("cholesky", "lu", "qr", "eigh", "sygvd", "svd", "polar").
    route: ``jaxmg._routes.LOCAL``, ``BATCH`` or ``DISTRIBUTED``.
    mesh: where the call runs (concrete or abstract); None for a device's own arrays.
    grid: the process grid (distributed route only).
    spec: the layout in which the caller holds ``a`` (matrix outputs return to it); None where it
      is not known or the arrays are a device's own.
    rhs_specs: layouts given in ``matrix_specs`` for right-hand sides (None where not given).
    tile: the native tile size ``T_A`` (distributed route).
    shape, dtype: a's.
    natural: native Cholesky only: keep the factor in a's order, so that L can be read.
    stack_spec: batch route: the stack's layout, batch axis first, to which its matrix outputs
      return (its batch entry alone for other outputs; None where it is not known).
    stack_rhs: batch route: the layouts of the solutions of the right-hand sides, stacked (b's
      own where it is a stack; a shared b's behind the stack's batch entry).
    stack_outer: batch route: the mesh axes that split the batch axes of the stacks of enclosing
      ``jax.vmap`` calls (the stack is spread over the others).
    backend: the kernels of the route (``jaxmg.kernels.families.Backend``): ``kernels.native``'s on
      the distributed route, ``kernels.local``'s on the others; ``plan.backend.cholesky(plan)``
      runs the Cholesky family's kernels for this plan.
    """

    family: str
    route: str
    mesh: Optional[AnyMesh]
    grid: Optional[Grid]
    spec: Optional[P]
    rhs_specs: tuple
    tile: int
    shape: tuple
    dtype: np.dtype
    natural: bool = False
    stack_spec: Optional[P] = None
    stack_rhs: tuple = ()
    stack_outer: tuple = ()
    backend: Backend = dataclasses.field(kw_only=True)

    def __reduce__(self):
        """Pickled with its meshes kept as device ids (``jaxmg._layout.reduce_meshes``), so that a
        module pickles as its arrays do."""
        return _layout.reduce_meshes(self)

    def __eq__(self, other: object) -> bool:
        """Equal fields, meshes compared as a trace sees them (``jaxmg._layout.meshes_agree``): the
        plan of a module made from a concrete array equals that of one made from a traced one."""
        return _layout.agreeing_eq(self, other)

    def __hash__(self) -> int:
        return _layout.agreeing_hash(self)

    @property
    def distributed(self) -> bool:
        return self.route == _routes.DISTRIBUTED

    @property
    def local(self) -> bool:
        """The local route: one matrix with the device's own solver (not a stack)."""
        return self.route == _routes.LOCAL

    @property
    def layout(self) -> Optional[NamedSharding]:
        """The layout in which matrices are computed (products included): the grid's on the
        distributed route, replicated on the local route over a mesh (the device's solver needs
        whole matrices), else None (a device's own arrays, and the batch route: as they are)."""
        if self.distributed:
            assert self.mesh is not None and self.grid is not None, "a distributed plan has a mesh and a grid"
            return NamedSharding(self.mesh, self.grid.spec)
        if self.route == _routes.LOCAL and self.mesh is not None:
            return NamedSharding(self.mesh, P())
        return None

    @property
    def caller(self) -> Optional[NamedSharding]:
        """The caller's layout of ``a`` where it is known and the call places its outputs."""
        if self.spec is None or self.mesh is None or self.route == _routes.BATCH:
            return None
        return NamedSharding(self.mesh, self.spec)

    @property
    def outputs(self) -> Optional[NamedSharding]:
        """The layout of the kernels' matrix outputs (and of the derivative formulas over them):
        the caller's on the distributed route, else the computation's."""
        if self.distributed:
            assert self.mesh is not None and self.spec is not None, "a distributed plan has a mesh and a's layout"
            return NamedSharding(self.mesh, self.spec)
        return self.layout

    @property
    def wide(self) -> bool:
        """Whether ``a`` has fewer rows than columns."""
        return self.shape[0] < self.shape[1]

    def adjoint(self) -> Plan:
        """The plan of ``a^H``: the shape reversed, the layouts' rows and columns swapped."""
        spec = None if self.spec is None else _swapped(self.spec)
        grid = None if self.grid is None else Grid(self.grid.mesh, self.grid.col_axes, self.grid.row_axes)
        return dataclasses.replace(self, spec=spec, grid=grid, shape=self.shape[::-1])

    def enter(self, x):
        """Matrix argument ``x`` in the computation's layout (trace-only), through the caller's
        layout first, so that its cotangent comes back in that layout."""
        layout = self.layout
        if layout is None:
            return self.whole(x)
        if self.caller is not None and self.caller.spec != layout.spec:
            x = self.held(x)
        return _sharded.pinned(x, layout.spec, self.mesh)

    def whole(self, x):
        """Array ``x`` whole where the plan computes on a device's own arrays (the batch route, and
        the local route without a mesh: no layout) and ``x`` is split over Explicit mesh axes (as
        the type of a member of a stack split inside its matrices is, under ``jax.vmap``): the
        device's solvers take whole matrices (trace-only; unchanged elsewhere)."""
        return whole_where_split(x) if self.layout is None and hasattr(x, "ndim") else x

    def held(self, x):
        """Matrix argument ``x`` as the caller holds it: in the caller's layout of ``a`` where it is
        known (trace-only; unchanged elsewhere). Every matrix argument of a call passes here once,
        where the call's trace begins, so that its cotangent, the sum of what each of its uses
        gives, comes back in that layout whatever layout the derivative rules compute in (on Auto
        mesh axes XLA would otherwise choose it)."""
        spec = self._caller_spec(x)
        return x if spec is None else _sharded.place(x, spec, self.mesh)

    def leave(self, x, name: str = "the result"):
        """Matrix output ``x`` in the caller's layout of ``a`` (trace-only); on the local route an
        output that the caller's layout does not divide stays replicated."""
        spec, caller = self._caller_spec(x), self.caller
        if spec is None or caller is None:
            return x
        _layout.check_output_fits(x.shape, spec, caller.mesh, name)
        return _sharded.place(x, spec, self.mesh)

    def _caller_spec(self, x) -> Optional[P]:
        """The caller's layout of ``a`` for array ``x`` (its spec padded to x's rank); None where
        none is known, and on the local route where it does not divide x's shape (a matrix of
        another shape than a's, such as the square head of a wide a: x then stays as it is)."""
        caller = self.caller
        if caller is None or x is None:
            return None
        spec = _layout.padded_spec(caller.spec, x.ndim)
        if not self.distributed and not _layout.divides(x.shape, spec, caller.mesh):
            return None
        return spec


def with_rhs_layouts(plan: Plan, rhs) -> Plan:
    """``plan`` with the known layouts of right-hand sides ``rhs`` recorded where none is given
    (inside the boundary's compiled call an array on Auto axes no longer says its layout, and
    solutions return to their right-hand side's), on the batch route their stacks' too
    (:func:`with_stack_rhs`)."""
    if plan.mesh is None or not rhs:
        return plan
    specs = list(plan.rhs_specs) + [None] * (len(rhs) - len(plan.rhs_specs))
    for k, b in enumerate(rhs):
        if specs[k] is None and hasattr(b, "ndim"):
            known = _context.caller_spec(b, plan.mesh)
            if known is None and (concrete_value(b) is not None or _context.whole_on(b, plan.mesh)):
                known = P()  # an array off the mesh (NumPy, one device; typed on none in jit): whole
            specs[k] = None if known is None else _layout.padded_spec(known, b.ndim)
    return with_stack_rhs(dataclasses.replace(plan, rhs_specs=tuple(specs)), rhs)


def with_stack_rhs(plan: Plan, rhs) -> Plan:
    """A batch-route ``plan`` with the layouts its solutions of right-hand sides ``rhs`` return to
    (:attr:`Plan.stack_rhs`): a stacked b's own where it is known, on the stack's mesh; a b shared
    by every matrix, its own behind the stack's batch entry; else the batch entry alone."""
    mesh = plan.mesh
    if plan.route != _routes.BATCH or plan.stack_spec is None or mesh is None:
        return plan
    batch = tuple(plan.stack_spec)[:1] or (None,)
    layouts = []
    for b in rhs:
        ndim = getattr(b, "ndim", 0) + 1
        stack = _context.stack_of(b)
        own = None
        if stack is None:
            known = _context.caller_spec(b, mesh)
            used = set(_layout.entry_axes(batch[0]))
            if known is not None and not used & _layout.spec_axes(known):
                own = P(*batch, *known)
        elif stack.mesh is not None and _layout.same_mesh(stack.mesh, mesh):
            own = stack.layout
        layouts.append(_layout.padded_spec(P(*batch) if own is None else own, ndim))
    return dataclasses.replace(plan, stack_rhs=tuple(layouts))


def place_rhs(plan: Plan, b, name: str = "b", rows: Optional[int] = None, index: int = 0):
    """Check right-hand side ``b`` against the plan's ``a`` and place it for the solve (trace-only).

    Returns ``(b, spec, home)``: ``b`` in the layout it is solved in, that layout (None where
    the arrays are not placed), and ``home``, which takes a solution back to b's own layout."""
    b = _checks.of_dtype(_checks.as_array(b, name), plan.dtype)
    _checks.check_same_dtype(b, name, plan.dtype, "a")
    _checks.check_rhs(b, name, plan.shape[0] if rows is None else rows, "a")
    given = plan.rhs_specs[index] if index < len(plan.rhs_specs) else None
    if plan.distributed:
        assert plan.mesh is not None and plan.grid is not None, "a distributed plan has a mesh and a grid"
        _context.check_reachable(
            b,
            name,
            plan.mesh,
            target="the factorisation's mesh (a's, else its device's)",
            fix="Make the factorisation on b's mesh (shard a there, or pass mesh= to the module)",
        )
        known = given if given is not None else _context.caller_spec(b, plan.mesh)
        spec, own = _layout.resolve_rhs(b, name, plan.grid, known)
        return _placed_rhs(b, spec, own, plan.mesh)
    mesh = plan.mesh if plan.layout is not None else _explicit_mesh_of(b)
    if mesh is None:
        return b, None, _same
    own = given if given is not None else _context.caller_spec(b, mesh)
    if own is None and plan.layout is not None:
        own = _default_rows(plan, b)
    if own is not None:
        entries = _layout.validate_spec(own, mesh, name, b.ndim)
        _layout.check_divides(b.shape, entries, mesh, name)
        own = P(*entries)
    return _placed_rhs(b, P(), own, mesh)


def _same(x):
    return x


def held_layout(x, *, default: bool = True) -> Optional[NamedSharding]:
    """The layout in which the caller holds ``x`` for a call that composes JAX's operations with
    jaxmg's (``jaxmg.numpy``, ``jaxmg.scipy``): x's own where it is known, else, for one matrix where
    ``default``, the mesh's axes in order (rule 4 of ``jaxmg._layout``, as a call on it lays it
    out) where they divide it. None where nothing is to be placed: a concrete ``x`` (it carries no
    derivative), a stack under ``jax.vmap``, inside ``jax.shard_map``, on no mesh of several
    devices, and an ``x`` whole on a mesh of Explicit axes (``jaxmg._context.whole_on``: its type
    names no mesh)."""
    if not _context.is_tracer(x) or _context.manual() or _context.stack_of(x) is not None:
        return None
    mesh = _context.find_mesh(None, x)
    if mesh is None or mesh.size < 2:
        return None
    spec = _context.caller_spec(x, mesh)
    if spec is None and default and x.ndim == 2 and len(mesh.axis_names) <= 2 and not _context.whole_on(x, mesh):
        spec = _layout.default_spec(mesh)
    if spec is None or not _layout.divides(x.shape, _layout.padded_spec(spec, x.ndim), mesh):
        return None
    return NamedSharding(mesh, _layout.padded_spec(spec, x.ndim))


def check_mesh_context(x, mesh) -> None:
    """An eager transformation (``jax.grad``, ``jax.jvp``) of an array ``x`` on a mesh of Explicit and
    Auto axes places its tangents by a sharding constraint that needs the mesh as the context, as
    JAX's own code there does: without it, say so (instead of JAX's lowering error)."""
    types = set(getattr(mesh, "axis_types", ()))
    if {AxisType.Explicit, AxisType.Auto} <= types and _context.is_eager((x,)):
        if _context.context_mesh(eager=True) is None:
            raise ValueError(
                f"an eager jax.grad or jax.jvp of an array {tuple(x.shape)} on a mesh of Explicit and Auto axes "
                f"{dict(zip(mesh.axis_names, mesh.axis_types))} needs that mesh as the context: call it inside "
                "`with jax.set_mesh(mesh):` (as JAX's own functions there need), or inside jax.jit."
            )


def _default_rows(plan: Plan, b) -> Optional[P]:
    """The layout of a right-hand side whose own is not known (Auto mesh axes inside
    ``jax.jit``): rows split as a's (the default of rule 4), where they divide it; else None."""
    if plan.spec is None or plan.mesh is None:
        return None
    rows = P(_layout.padded_spec(plan.spec, 2)[0], *(None,) * (b.ndim - 1))
    return rows if _layout.divides(b.shape, rows, plan.mesh) else None


def whole_where_split(x):
    """Array ``x`` replicated where it is split over Explicit mesh axes (trace-only; unchanged
    elsewhere): whole for the device's own solver, and for indexing, which JAX refuses on such an
    array without a layout for the result."""
    mesh = _explicit_mesh_of(x)
    return x if mesh is None else _sharded.pinned(x, P(), mesh)


def _explicit_mesh_of(x):
    """The mesh of ``x`` where it is split over Explicit axes (the device's own solver cannot take
    it so: it is gathered; on a mesh of Explicit and Auto axes too), else None."""
    sharding = _context.typed_sharding(x)
    if sharding is None or not any(_layout.entry_axes(e) for e in sharding.spec):
        return None
    return sharding.mesh


def _swapped(spec: P) -> P:
    rows, cols = _layout.padded_spec(spec, 2)
    return P(cols, rows)


def _placed_rhs(b, spec, own, mesh):
    """b placed in ``spec`` (through its own layout ``own`` first, so that its cotangent comes
    back in it), and the function that takes a solution to ``own``."""
    if own is None or own == spec:
        return _sharded.place(b, spec, mesh), spec, _same
    b = _sharded.place(_sharded.place(b, own, mesh), spec, mesh)

    def home(x):
        entries = tuple(own) + (None,) * (x.ndim - len(tuple(own)))
        if not _layout.divides(x.shape, entries[: x.ndim], mesh):
            return x
        return _sharded.place(x, P(*entries[: x.ndim]), mesh)

    return b, spec, home


def check(
    matrices: Sequence[tuple],
    rhs: Sequence[tuple],
    *,
    square: bool,
    T_A,
    backend,
    flags,
    tall: bool = True,
    family: Optional[str] = None,
) -> list:
    """The arguments' checks (names, dtypes, ranks and shapes, flags); returns them as arrays.
    A dtype error names ``family`` as JAX's does ("cholesky does not accept dtype float16")."""
    for name, value in (flags or {}).items():
        _checks.check_flag(value, name)
    _checks.check_backend(backend)
    _checks.check_tile(T_A)
    a_name = matrices[0][0]
    named = list(matrices) + list(rhs)
    a = _checks.as_array(named[0][1], a_name)
    _checks.check_dtype(a, a_name, family)
    arrays = [a] + [_checks.of_dtype(_checks.as_array(value, name), a.dtype) for name, value in named[1:]]
    for (name, _), x in zip(named[1:], arrays[1:]):
        _checks.check_same_dtype(x, name, a.dtype, a_name)
    for (name, _), x in zip(matrices, arrays):
        _checks.check_matrix(x, name, square=square, tall=tall and not square)
        if x.shape != a.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {a_name} has shape {tuple(a.shape)}; they must match."
            )
    for (name, _), x in zip(rhs, arrays[len(matrices) :]):
        _checks.check_rhs(x, name, a.shape[0], a_name)
    return arrays


def resolve(
    family: str,
    context: Context,
    options: Options,
    *,
    matrices: Sequence[tuple],
    rhs: Sequence[tuple] = (),
    num_rhs: int = 0,
    natural: bool = False,
) -> tuple[Plan, list]:
    """Check the arguments of a call of ``family`` in ``context`` with the caller's ``options`` and
    plan it.

    ``matrices`` and ``rhs`` are ``(name, value)`` pairs: matrices rank 2 and of the family's
    shape (:func:`jaxmg._routes.shapes_taken`), with a's shape; right-hand sides a vector or a matrix with a's rows;
    all of a's dtype. ``num_rhs`` right-hand sides given later (``module.solve(b)``) may have
    specs in ``matrix_specs``. ``natural`` (a flag, checked as ``donate`` is) keeps a native
    Cholesky factor in natural order. Returns the plan and the arguments as arrays (matrices
    first).
    """
    square, tall = _routes.shapes_taken(family)
    flags = dict(natural=natural, donate=options.donate)
    T_A, mesh, matrix_specs, backend = options.T_A, options.mesh, options.matrix_specs, options.backend
    arrays = check(matrices, rhs, square=square, tall=tall, T_A=T_A, backend=backend, flags=flags, family=family)
    _layout.split_specs(matrix_specs, len(matrices) + max(len(rhs), num_rhs))  # their type and count, on any route
    a, count = arrays[0], len(matrices)
    if context.kind == MANUAL:
        _routes.choose(family, backend, None, a.shape, a.dtype, manual=True)
        return _manual_plan(family, arrays, count), arrays
    stack = context.stack
    found = _context.find_mesh(mesh, a, arrays[1:])
    if found is None and stack is not None:
        found = stack.mesh or _context.context_mesh()
    route = _routes.choose(family, backend, found, a.shape, a.dtype, stacked=0 if stack is None else stack.size)
    if route != _routes.DISTRIBUTED and _context.is_device_mesh(found):
        found = None  # jaxmg's own 1 x 1 mesh decided the route; the call runs on the arrays as they are
    if context.differentiated and stack is None and found is not None:
        check_mesh_context(a, found)
    common: dict[str, Any] = dict(
        shape=tuple(a.shape),
        dtype=np.dtype(a.dtype),
        natural=natural,
        backend=native.BACKEND if route == _routes.DISTRIBUTED else local.BACKEND,
    )
    if route == _routes.BATCH:
        assert stack is not None, "the batch route runs over a stack"
        plan = Plan(
            family, route, found, None, None, (), 1, stack_spec=stack.layout, stack_outer=stack.outer_axes, **common
        )
        return with_stack_rhs(plan, arrays[count:]), arrays
    if route == _routes.DISTRIBUTED:
        _check_stack_unsplit(stack, family)
        named = [(x, name) for (name, _), x in zip(matrices, arrays)]
        layout = grid_layout(found, matrix_specs, named, num_rhs=max(len(rhs), num_rhs))
        tile = T_A if T_A is not None else _layout.auto_tile(a.shape, layout.grid)
        plan = Plan(family, route, found, layout.grid, layout.out_spec, layout.rhs_specs, int(tile), **common)
    else:
        spec, rhs_specs = _local_specs(found, matrix_specs, matrices, arrays, max(len(rhs), num_rhs))
        plan = Plan(family, route, found, None, spec, rhs_specs, 1, **common)
    return with_rhs_layouts(plan, arrays[count:]), arrays


def _manual_plan(family: str, arrays: Sequence, count: int) -> Plan:
    """The plan of a call on a device's own arrays (inside a ``jax.shard_map``): the local route
    (:func:`on_own_arrays`)."""
    a = arrays[0]
    shape, dtype = tuple(a.shape), np.dtype(a.dtype)
    plan = Plan(family, _routes.LOCAL, None, None, None, (), 1, shape, dtype, backend=local.BACKEND)
    return on_own_arrays(plan, arrays[:count], arrays[count:])


def on_own_arrays(plan: Plan, matrices: Sequence, rhs: Sequence = ()) -> Plan:
    """``plan`` (a call's, or that of a module made outside a ``jax.shard_map`` and used inside
    it) for a call on a device's own arrays, ``matrices`` (a first) and right-hand sides ``rhs``:
    the local route, on no mesh. Where an array is split over mesh axes left free and Explicit
    (a ``jax.shard_map`` over some of the axes), the call runs on that mesh as the local route
    over a mesh does: matrices and their tangents enter whole (the device's solver needs whole
    matrices), and matrix outputs and cotangents leave in a's layout, so the derivative rules see
    no split matrix. A factorisation of the distributed route (cuSOLVERMp's, in its grid layout)
    cannot be used there: a ValueError says so."""
    if plan.distributed:
        raise ValueError(
            f"a {plan.family} factorisation made by the distributed route (over the whole mesh, in "
            "cuSOLVERMp's grid layout) cannot be used inside jax.shard_map, where each device solves "
            "with its own arrays: make the module inside the jax.shard_map body, or use it outside."
        )
    own = dataclasses.replace(
        plan,
        route=_routes.LOCAL,
        mesh=None,
        grid=None,
        spec=None,
        rhs_specs=(),
        tile=1,
        stack_spec=None,
        stack_rhs=(),
        stack_outer=(),
        backend=local.BACKEND,
    )
    free = next((m for m in map(_explicit_mesh_of, [*matrices, *rhs]) if m is not None), None)
    if free is None:
        return own
    spec = _context.caller_spec(matrices[0], free) if matrices else None
    own = dataclasses.replace(own, mesh=free, spec=None if spec is None else P(*_layout.padded_spec(spec, 2)))
    return with_rhs_layouts(own, rhs)


def _check_stack_unsplit(stack, family: str) -> None:
    """Refuse a stack under ``jax.vmap`` whose batch axis Explicit mesh axes split where each matrix
    takes the distributed route (over the whole grid, one matrix at a time): inside the vmap those
    axes belong to the batch, so no grid over the mesh can be formed there."""
    if stack is None or stack.sharding is None:
        return
    entries = tuple(stack.sharding.spec)
    axes = _layout.entry_axes(entries[0] if entries else None)
    mesh = stack.sharding.mesh
    explicit = [name for name in axes if dict(zip(mesh.axis_names, mesh.axis_types))[name] == AxisType.Explicit]
    if explicit:
        raise ValueError(
            f"{family}: the stack under jax.vmap is split over its batch axis by the Explicit mesh axes "
            f"{tuple(explicit)}, and its matrices take the distributed route (each one over the whole grid, "
            "one at a time), which needs those axes. Leave the batch axis unsplit "
            "(jax.sharding.reshard(stack, P(None, ...)), or split the matrices instead, e.g. P(None, 'x', 'y')), "
            "or pass backend='portable' for the batch route if each matrix fits on one device."
        )


def grid_layout(mesh, matrix_specs, matrices: Sequence[tuple], num_rhs: int = 0) -> _layout.Layout:
    """The process grid and layouts of a distributed call of the matrices ``matrices``
    (``(array, name)`` pairs, ``a`` first) on ``mesh`` (found as every call finds it where None):
    ``jaxmg._layout.resolve`` given what ``jaxmg._context`` knows of a's layout."""
    a = matrices[0][0]
    found = _context.find_mesh(mesh, a, [x for x, _ in matrices[1:]])
    assert found is not None, "the distributed route runs on a known mesh"
    for x, name in matrices:
        _context.check_reachable(x, name, found)
    return _layout.resolve(found, matrix_specs, matrices, _context.caller_spec(a, found), num_rhs=num_rhs)


def _local_specs(mesh, matrix_specs, matrices, arrays, num_rhs: int):
    """The caller's layouts on the local route: a's (given, else read from the array, else the
    mesh's axes in order where they divide it; all matrix arguments share it) and those given for
    right-hand sides."""
    if mesh is None:
        return None, ()
    for (name, _), x in zip(matrices, arrays):
        _context.check_reachable(x, name, mesh)
    specs = _layout.split_specs(matrix_specs, len(matrices) + num_rhs)
    spec = specs[0] if specs[0] is not None else _context.caller_spec(arrays[0], mesh)
    if spec is None and len(mesh.axis_names) <= 2:  # not known: the mesh's axes in order (rule 4)
        default = _layout.default_spec(mesh)
        spec = default if all(_layout.divides(x.shape, default, mesh) for x in arrays[: len(matrices)]) else None
    if spec is not None:
        entries = _layout.validate_spec(spec, mesh, matrices[0][0], 2)
        for (name, _), x in zip(matrices, arrays):
            _layout.check_divides(x.shape, entries, mesh, name)
        spec = P(*entries)
    return spec, tuple(specs[len(matrices) :])


def module_plan(plan: Plan, arrays, matrices: Sequence, context: Context) -> Plan:
    """A module's plan for a call of one of its methods in ``context``: on the device's own arrays
    inside a ``jax.shard_map`` (:func:`on_own_arrays`, ``matrices``: the matrices it keeps), and
    on the concrete mesh beneath ``arrays`` (its leaves) where the module was made inside
    ``jax.jit`` (its plan holds the abstract mesh) and is now used eagerly."""
    from jax.sharding import Mesh

    _check_module_dtypes(plan, arrays)
    if context.kind == MANUAL:
        return on_own_arrays(plan, matrices)
    if plan.mesh is None or isinstance(plan.mesh, Mesh):
        return plan
    for x in arrays:
        found = _context.mesh_of(x)
        if isinstance(found, Mesh) and found.abstract_mesh == plan.mesh:
            grid = None if plan.grid is None else dataclasses.replace(plan.grid, mesh=found)
            return dataclasses.replace(plan, mesh=found, grid=grid)
    return plan


def _check_module_dtypes(plan: Plan, arrays) -> None:
    """Raise where a module's inexact arrays are not in the dtype of the matrix it factored (or its
    real counterpart: eigenvalues, singular values): the module was cast after it was made (a
    ``jax.tree.map`` of ``x.astype``), so its plan and its arrays disagree; or where it holds 64-bit
    arrays and is used inside ``jax.enable_x64(False)`` (as the functions refuse them there)."""
    available = np.dtype(jax.dtypes.canonicalize_dtype(plan.dtype))
    if available != plan.dtype:
        raise TypeError(
            f"this module was made for {plan.dtype} matrices (while jax_enable_x64 was on), which 64-bit mode, "
            f"off here, does not offer; use it with 64-bit mode on (inside jax.enable_x64(True)), or make it "
            f"from a.astype(jnp.{available}) to use it here."
        )
    real = np.finfo(plan.dtype).dtype
    for x in arrays:
        dtype = getattr(x, "dtype", None)
        if dtype is not None and np.issubdtype(dtype, np.inexact) and dtype not in (plan.dtype, real):
            raise TypeError(
                f"this module was made for {plan.dtype} matrices but holds {dtype} arrays (they were cast "
                f"after it was made, e.g. by jax.tree.map); a module runs in the dtype of the matrix it "
                f"factored: make it from a.astype({dtype}) instead."
            )


def per_shard_tile(family: str, grid: Grid, backend: str, T_A: Optional[int], local_shape, dtype) -> Optional[int]:
    """The plan of a per-shard call of ``family`` (``jaxmg.ops.local``) on ``grid``'s local blocks
    of shape ``local_shape``: the native tile where its route is distributed (``backend`` and
    ``T_A`` checked as everywhere), else None: the device's own solver then runs on the gathered
    matrix."""
    _checks.check_backend(backend)
    _checks.check_tile(T_A)
    shape = (local_shape[0] * grid.nprow, local_shape[1] * grid.npcol)
    if _routes.choose(family, backend, grid.mesh, shape, dtype) != _routes.DISTRIBUTED:
        return None
    return T_A or _layout.auto_tile(shape, grid)
