"""Small building blocks for matrix algebra on sharded *global* arrays.

Everything here keeps a matrix in a 2-D layout ``NamedSharding(mesh, P(r, c))``
(``r``/``c``: a mesh axis, a tuple of axes, or ``None``) and never gathers it
onto one device: products go through ``jnp.matmul`` with a sharding annotation
(XLA's SPMD partitioner splits them), masks and broadcast vectors are created
already laid out, and the only replicated values are small vectors.

A *layout* argument ``like`` may be

* ``None``: no sharding is imposed (single-device arrays);
* a ``jax.sharding.NamedSharding`` (its spec is padded with ``None`` to the rank
  of the array it is applied to);
* a ``(mesh, spec)`` pair, as :func:`layout_of` returns;
* an array (or tracer), whose layout :func:`layout_of` finds.

Both kinds of mesh axes are handled, eagerly and inside ``jit``:

* **Explicit** axes (``jax.make_mesh``'s default from JAX 0.11 on): the sharding
  is part of the type, so results are placed with ``out_sharding=`` and
  ``jax.sharding.reshard``. Binary ops between differently sharded arrays
  raise, ``x.T`` flips the spec and a product contracting sharded dimensions
  needs ``out_sharding``: the helpers take care of all three.
* **Auto** axes: results are pinned with ``jax.lax.with_sharding_constraint``.
  Inside ``jit`` the type of an Auto-sharded tracer carries no layout, so
  :func:`layout_of` returns ``None`` there: pass the layout explicitly.

Everything here is trace-only: it runs inside the public boundary's trace of a call.

JAX pitfalls met (0.10 - 0.12) that these helpers avoid:

* JAX 0.12, inside ``jit`` without a ``jax.set_mesh`` context:
  ``lax.broadcast_in_dim(..., out_sharding=)``, ``jnp.zeros(..., out_sharding=)``,
  ``lax.full_like`` and ``jnp.zeros_like(x)`` of an Explicit-sharded tracer
  silently return an *unsharded* array; ``lax.broadcasted_iota(out_sharding=)``,
  ``jnp.matmul(out_sharding=)``, ``jnp.reshape(out_sharding=)`` and ``reshard``
  honour it. Laid-out constants are therefore built from iotas.
* Eagerly, an op that creates a sharded constant (``broadcasted_iota`` with
  ``out_sharding``) fails outside a ``jax.set_mesh`` context ("Length of device
  assignment 1 ..."); ``jax.set_mesh`` itself cannot be entered inside ``jit``.
* A bare ``PartitionSpec`` as ``out_sharding`` needs a mesh context; a
  ``NamedSharding`` (on a concrete or abstract mesh) does not.
* Slicing (``x[:k]``), ``jnp.diagonal`` and ``triangular_solve`` on dimensions
  sharded over Explicit axes raise; masks (``jnp.where`` with laid-out iotas)
  and reductions are used instead, and triangular inverses are formed by
  :func:`tri_inv` from matmuls and a sharded batch of small block inverses.
* Auto axes, eagerly: an op on two differently laid-out arrays (``a + a.T``)
  silently returns a *replicated* array; everything here is constrained.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from .. import _sharded
from .._layout import entry_axes, padded_spec

__all__ = [
    "layout_of",
    "resolve",
    "kind",
    "matvec",
    "placed_tangent",
    "matmul",
    "ct",
    "tril",
    "triu",
    "sym_part",
    "lower_read",
    "lower_read_weights",
    "diag_embed",
    "tri_inv",
    "tri_sandwich",
]

_HIGHEST = jax.lax.Precision.HIGHEST


# --------------------------------------------------------------------------- layouts


def _spec_axes(spec) -> tuple:
    out = ()
    for entry in tuple(spec):
        out += entry_axes(entry)
    return out


def _entry(axes: tuple):
    """A PartitionSpec entry for a tuple of axis names."""
    return None if not axes else (axes[0] if len(axes) == 1 else tuple(axes))


def _axis_size(mesh, entry) -> int:
    shape = dict(mesh.shape)
    return math.prod(shape[name] for name in entry_axes(entry))


def layout_of(x) -> tuple[Any, P] | None:
    """``(mesh, spec)`` of ``x``'s layout, or ``None`` when it has none.

    A concrete array's own ``NamedSharding`` is used (so Auto axes are seen);
    for a tracer, ``jax.typeof(x).sharding``, which carries the layout for
    Explicit axes only: ``None`` comes back for an Auto-sharded tracer, whose
    layout is not known while tracing. ``spec`` has one entry per dimension.
    Fully replicated arrays give ``None``.
    """
    sharding = None
    if not isinstance(x, jax.core.Tracer):
        sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        try:
            sharding = getattr(jax.typeof(x), "sharding", None)
        except TypeError:
            sharding = None
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    if not _spec_axes(sharding.spec):
        return None
    return sharding.mesh, padded_spec(sharding.spec, jnp.ndim(x))


def resolve(like) -> NamedSharding | None:
    """``like`` (None, NamedSharding, ``(mesh, spec)``, PartitionSpec or an array) as a NamedSharding, or None.

    A bare PartitionSpec is taken on the current (abstract) mesh context.
    """
    if like is None:
        return None
    if isinstance(like, NamedSharding):
        return like
    if isinstance(like, P):
        mesh = jax.sharding.get_abstract_mesh()
        if mesh is None or mesh.empty:
            raise ValueError("a bare PartitionSpec needs a mesh context; pass a NamedSharding instead")
        return NamedSharding(mesh, like)
    if isinstance(like, tuple) and len(like) == 2 and isinstance(like[1], P):
        return NamedSharding(like[0], like[1])
    found = layout_of(like)
    return None if found is None else NamedSharding(*found)


def kind(like) -> str | None:
    """``"explicit"``, ``"auto"``, or ``None`` when the layout imposes nothing (none, or replicated)."""
    sh = resolve(like)
    if sh is None:
        return None
    names = _spec_axes(sh.spec)
    if not names:
        return None
    types = dict(zip(sh.mesh.axis_names, sh.mesh.axis_types))
    found = {types[name] for name in names}
    if found == {jax.sharding.AxisType.Explicit}:
        return "explicit"
    if found == {jax.sharding.AxisType.Auto}:
        return "auto"
    raise ValueError(
        f"layout {sh.spec} uses mesh axes of types {sorted(str(t) for t in found)}; "
        "only all-Explicit or all-Auto layouts are supported"
    )


# --------------------------------------------------------------------------- traced building blocks
# These run inside a trace; ``sh`` is a resolved NamedSharding (or None).


def _named(sh: NamedSharding, ndim: int, spec: P | None = None) -> NamedSharding:
    return NamedSharding(sh.mesh, padded_spec(sh.spec if spec is None else spec, ndim))


def _place(x, sh: NamedSharding | None, spec: P | None = None):
    """``x`` laid out as ``sh`` (or ``spec`` on its mesh); a no-op without a layout."""
    k = kind(sh)
    if k is None:
        return x
    assert sh is not None, "a layout kind comes from a sharding"
    target = _named(sh, jnp.ndim(x), spec)
    if k == "explicit":
        return jax.sharding.reshard(x, target)
    return jax.lax.with_sharding_constraint(x, target)


def _replicate(v, sh):
    """``v`` replicated over the mesh of ``sh``, also where ``sh`` is itself replicated (there XLA
    would otherwise be free to leave a reduction of laid-out operands sharded); a no-op without
    a mesh, or on one whose axes are not all Explicit or all Auto."""
    if kind(sh) is not None:
        return _place(v, sh, P())
    mesh = getattr(sh, "mesh", None)
    if mesh is None or mesh.empty:
        return v
    types = set(mesh.axis_types)
    if types == {jax.sharding.AxisType.Explicit}:
        return jax.sharding.reshard(v, NamedSharding(mesh, P()))
    if types == {jax.sharding.AxisType.Auto}:
        return jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P()))
    return v


def _matmul(x, y, sh, adj_x=False, adj_y=False):
    if adj_x:
        x = jnp.conj(x).swapaxes(-1, -2)
    if adj_y:
        y = jnp.conj(y).swapaxes(-1, -2)
    if kind(sh) == "explicit":
        ndim = max(jnp.ndim(x), jnp.ndim(y))
        return jnp.matmul(x, y, precision=_HIGHEST, out_sharding=_named(sh, ndim))
    return _place(jnp.matmul(x, y, precision=_HIGHEST), sh)


def _ct(x, sh):
    return _place(jnp.conj(x).swapaxes(-1, -2), sh)


def _iota(shape, dim, sh, spec: P | None = None, dtype=jnp.int32):
    k = kind(sh)
    if k == "explicit":
        return jax.lax.broadcasted_iota(dtype, shape, dim, out_sharding=_named(sh, len(shape), spec))
    return _place(jax.lax.broadcasted_iota(dtype, shape, dim), sh, spec)


def _zeros(shape, dtype, sh, spec: P | None = None):
    return (_iota(shape, 0, sh, spec) * 0).astype(dtype)


def _rows(v, n_cols, sh):
    """``M[i, j] = v[i]``, (len(v), n_cols), laid out (v small, replicated)."""
    v = _replicate(v, sh)
    return _zeros((v.shape[0], n_cols), v.dtype, sh) + v[:, None]


def _cols(v, n_rows, sh):
    """``M[i, j] = v[j]``, (n_rows, len(v)), laid out (v small, replicated)."""
    v = _replicate(v, sh)
    return _zeros((n_rows, v.shape[0]), v.dtype, sh) + v[None, :]


def _offset(shape, sh):
    """``j - i`` for a 2-D shape, laid out."""
    return _iota(shape, 1, sh) - _iota(shape, 0, sh)


def _eye(shape, sh):
    return _offset(shape, sh) == 0


def _where(mask, x):
    return jnp.where(mask, x, jnp.zeros((), x.dtype))


def _tril(x, sh, k=0):
    return _where(_offset(x.shape, sh) <= k, _place(x, sh))


def _triu(x, sh, k=0):
    return _where(_offset(x.shape, sh) >= k, _place(x, sh))


def _diag_embed(v, sh, shape=None, dtype=None):
    n = v.shape[0]
    shape = (n, n) if shape is None else tuple(shape)
    dtype = v.dtype if dtype is None else dtype
    return _where(_eye(shape, sh), _cols(v.astype(dtype), shape[0], sh))


def _sym(x, sh):
    x = _place(x, sh)
    return (x + _ct(x, sh)) / 2


def _lower_read(x, sh):
    """The Hermitian matrix that a function reading only the lower triangle of ``x`` sees:
    ``tril(x, -1) + tril(x, -1)^H + Re diag(x)`` (LAPACK reads the real part of the diagonal)."""
    half = _lower_half(x, sh)
    return half + _ct(half, sh)


def _lower_half(x, sh):
    """``B = w * x`` laid out, with ``w`` 1 below the diagonal, 1/2 on it and 0 above: the part of
    ``x`` that a function reading only its lower triangle reads, ``H(x) = B + B^H``."""
    x = _place(x, sh)
    offset = _offset(x.shape, sh)
    real = jnp.finfo(x.dtype).dtype
    w = jnp.where(offset < 0, jnp.ones((), real), jnp.where(offset == 0, jnp.full((), 0.5, real), jnp.zeros((), real)))
    return w.astype(x.dtype) * x  # the weights in x's dtype: no implicit promotion of a real array


def _reshape(x, shape, sh, spec):
    if kind(sh) == "explicit":
        return jnp.reshape(x, shape, out_sharding=_named(sh, len(shape), spec))
    return _place(jnp.reshape(x, shape), sh, spec)


# --------------------------------------------------------------------------- triangular inverse


def _num_blocks(n: int, sh: NamedSharding, max_block: int) -> int | None:
    """How many diagonal blocks the base case of :func:`tri_inv` uses (None: n cannot be split evenly)."""
    spec = padded_spec(sh.spec, 2)
    sr, sc = _axis_size(sh.mesh, spec[0]), _axis_size(sh.mesh, spec[1])
    need, every = math.lcm(sr, sc), sr * sc
    cands = [k for k in range(need, n + 1, need) if n % k == 0]
    if not cands:
        return None
    small = [k for k in cands if n // k <= max_block] or [max(cands)]
    spread = [k for k in small if k % every == 0] or small
    return min(spread)


def _block_diag_inv(t, nb: int, lower: bool, sh: NamedSharding):
    """Inverse of the block-diagonal part (nb blocks) of triangular ``t``, laid out like t.

    The diagonal blocks are taken out by a reshape to (nb, bs, nb, bs) -- local,
    as nb is a multiple of the mesh axis sizes -- and a masked sum over the
    second block index; they are inverted as a batch sharded over the mesh and
    put back the same way.
    """
    n = t.shape[-1]
    bs = n // nb
    r, c = padded_spec(sh.spec, 2)
    spec4 = P(r, None, c, None)
    t4 = _reshape(t, (nb, bs, nb, bs), sh, spec4)
    same = _iota(t4.shape, 0, sh, spec4) == _iota(t4.shape, 2, sh, spec4)
    d = jnp.sum(_where(same, t4), axis=2)  # (nb, bs, bs): the diagonal blocks
    batch = entry_axes(r) + entry_axes(c)
    if nb % (_axis_size(sh.mesh, r) * _axis_size(sh.mesh, c)):
        batch = entry_axes(r) or entry_axes(c)
    bspec = P(_entry(batch), None, None)
    d = _place(d, sh, bspec)
    eye = (_iota(d.shape, 1, sh, bspec) == _iota(d.shape, 2, sh, bspec)).astype(t.dtype)
    dinv = jax.lax.linalg.triangular_solve(d, eye, left_side=True, lower=lower)
    bspec4 = P(_entry(batch), None, None, None)
    same_b = _iota(t4.shape, 0, sh, bspec4) == _iota(t4.shape, 2, sh, bspec4)
    y4 = _place(_where(same_b, dinv[:, :, None, :]), sh, spec4)
    return _reshape(y4, (n, n), sh, padded_spec(sh.spec, 2))


def _tri_inv(t, sh, lower=True, max_block=2048):
    """The triangular inverse (see :func:`tri_inv`), differentiable at every order without
    differentiating ``triangular_solve`` (whose JVP builds unsharded masks, which Explicit
    mesh axes reject): ``(T^-1)' = -T^-1 T' T^-1``, two distributed matmuls."""
    return _tri_inv_diff(t, sh, bool(lower), max_block)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _tri_inv_diff(t, sh, lower, max_block):
    return _tri_inv_blocks(t, sh, lower, max_block)


@_tri_inv_diff.defjvp
def _tri_inv_jvp(sh, lower, max_block, primals, tangents):
    (t,), (t_dot,) = primals, tangents
    y = _tri_inv_diff(t, sh, lower, max_block)
    t_dot = _tril(t_dot, sh) if lower else _triu(t_dot, sh)  # only the triangle is read
    return y, -_matmul(_matmul(y, t_dot, sh), y, sh)


def _right_tri_solve(x, t, sh, lower=True):
    """``x T^-1`` for square triangular ``t``, laid out as ``sh``. Without a layout: one triangular
    solve from the right (the cost of one product, as JAX's own rules); over a layout: the
    distributed :func:`_tri_inv` and one distributed product, nothing gathered."""
    if kind(sh) is None:
        return jax.lax.linalg.triangular_solve(t, x, left_side=False, lower=lower)
    return _matmul(_place(x, sh), _tri_inv(t, sh, lower=lower), sh)


def _tri_inv_blocks(t, sh, lower, max_block):
    n = t.shape[-1]
    if t.ndim != 2 or t.shape[0] != n:
        raise ValueError(f"tri_inv needs a square matrix, got shape {t.shape}")
    if kind(sh) is None:
        eye = jnp.eye(n, dtype=t.dtype)
        return jax.lax.linalg.triangular_solve(t, eye, left_side=True, lower=lower)
    t = _place(t, sh)
    nb = _num_blocks(n, sh, max_block)
    if nb is None:  # n cannot be split over the layout: solve in one (replicated) piece
        full = _place(t, sh, P(None, None))
        eye = _place(jnp.eye(n, dtype=t.dtype), sh, P(None, None))
        return _place(jax.lax.linalg.triangular_solve(full, eye, left_side=True, lower=lower), sh)
    y = _block_diag_inv(t, nb, lower, sh)
    bs = n // nb
    bi = _iota((n, n), 0, sh) // bs
    bj = _iota((n, n), 1, sh) // bs
    g = 1
    while g < nb:
        gi, gj = bi // g, bj // g
        pair = (gi // 2) == (gj // 2)
        off = (gi > gj) if lower else (gi < gj)
        y = y - _matmul(_matmul(y, _where(pair & off, t), sh), y, sh)
        g *= 2
    return y


# --------------------------------------------------------------------------- public helpers


def placed_tangent(a, a_dot, layout: NamedSharding | None):
    """``a``'s tangent ``a_dot`` in ``layout`` (None: as it is), or None where ``a`` is not
    differentiated (``a`` is None, or ``a_dot`` is the symbolic zero of a custom JVP defined
    with ``symbolic_zeros=True``): the JVP rules then return a zero tangent without work."""
    if a is None or isinstance(a_dot, jax.custom_derivatives.SymbolicZero):
        return None
    if layout is None:
        return a_dot
    # pinned, not placed: under a second reverse-mode derivative the tangent is replayed with
    # the caller's cotangents (often unsharded) and must be brought to the layout there too
    return _sharded.pinned(a_dot, layout.spec, layout.mesh)


def matvec(a, x, layout: NamedSharding | None, trans: str = "N"):
    """``op(a) @ x`` for a matrix ``a`` in any layout and ``x`` (a vector or a few columns) in
    ``layout``, the product in ``layout`` (None: as XLA places it); op by ``trans`` ("N", "T"
    or "C"). Linear in both, so JAX transposes it.

    ``op(a) = a^T`` and ``a^H`` contract ``a``'s first axis (``x^T a``, with ``x`` and the
    product conjugated for "C"): no transposed or conjugated copy of ``a`` is made, so a sharded
    ``a`` is never laid out anew (a transposed copy of a sharded matrix is, gathered)."""
    if trans not in ("N", "T", "C"):
        raise ValueError(f"trans must be 'N', 'T' or 'C', got {trans!r}")
    if trans == "C":
        return jnp.conj(matvec(a, jnp.conj(x), layout, "T"))
    if trans == "N" or jnp.ndim(a) != 2:
        a = a if trans == "N" else jnp.swapaxes(a, -1, -2)  # a stack: batched products
        product = functools.partial(jnp.matmul, a, x, precision=_HIGHEST)
    else:
        numbers = (((0,), (0,)), ((), ()))
        product = functools.partial(jax.lax.dot_general, a, x, numbers, precision=_HIGHEST)
    if layout is not None and _explicit(layout):
        return product(out_sharding=_rhs_target(layout, jnp.ndim(x)))
    return _in_layout(product(), layout)


def lower_read_matvec(a, x, like, layout: NamedSharding | None, few: int = 16):
    """``H(a) @ x`` for ``H`` = :func:`lower_read` (the Hermitian matrix read from a's lower
    triangle), ``a`` laid out like ``like``, ``x`` (a vector or columns) and the product in
    ``layout`` (as :func:`matvec`), without forming ``H(a)``.

    It is ``B x + B^H x`` with ``B = w * a`` (:func:`_lower_half`: ``w`` is 1 below the diagonal,
    1/2 on it, 0 above). Linear in ``a``, and JAX's transpose of it is the cotangent of ``a``:
    ``w * (g x^H + x g^H)``, from ``B x`` an outer product in a's own orientation and from
    ``B^H x``, for up to ``few`` columns, the elementwise ``x g^H`` (the second term is a sum over
    rows of ``conj(B) * x``, not a product contracting a's first axis, whose transpose JAX writes
    as an N x N transpose). The whole cotangent is then a few products per element of vectors and
    of whatever is added to it (``2 g W(A^-1)`` in a log-determinant's derivative), which XLA
    fuses into the computation that consumes it: on one GPU the cotangent of a kernel matrix is
    then never written. More columns take the products.
    """
    half = _lower_half(a, resolve(like))
    product, upper = matvec(half, x, layout), jnp.conj(half)
    if (1 if jnp.ndim(x) == 1 else x.shape[-1]) > few:
        return product + matvec(upper, x, layout, trans="T")
    weighted = upper * x[:, None] if jnp.ndim(x) == 1 else upper[:, :, None] * x[:, None, :]
    return product + _in_layout(jnp.sum(weighted, axis=0), layout)


def _explicit(layout: NamedSharding) -> bool:
    return any(t == jax.sharding.AxisType.Explicit for t in layout.mesh.axis_types)


def _rhs_target(layout: NamedSharding, ndim: int) -> NamedSharding:
    return NamedSharding(layout.mesh, padded_spec(layout.spec, ndim))


def _in_layout(x, layout: NamedSharding | None):
    """A vector or a few columns constrained to ``layout`` (None: as it is)."""
    if layout is None:
        return x
    target = _rhs_target(layout, jnp.ndim(x))
    return jax.sharding.reshard(x, target) if _explicit(layout) else jax.lax.with_sharding_constraint(x, target)


def matmul(x, y, like, *, adj_x: bool = False, adj_y: bool = False):
    """``op(x) @ op(y)`` laid out like ``like``; ``op`` is the conjugate transpose when ``adj_*``.

    The operands may have any layout on the same mesh (XLA moves the data the
    product needs). Computed at ``Precision.HIGHEST``.
    """
    return _matmul(x, y, resolve(like), adj_x, adj_y)


def ct(x, like=None):
    """Conjugate transpose of a matrix, laid out like ``like`` (default: like ``x``)."""
    return _ct(x, resolve(x if like is None else like))


def tril(x, k: int = 0, like=None):
    """Lower triangle ``j <= i + k`` of a matrix, laid out like ``like`` (default: like ``x``)."""
    return _tril(x, resolve(x if like is None else like), k)


def triu(x, k: int = 0, like=None):
    """Upper triangle ``j >= i + k`` of a matrix, laid out like ``like`` (default: like ``x``)."""
    return _triu(x, resolve(x if like is None else like), k)


def sym_part(x, like=None):
    """Hermitian part ``(x + x^H) / 2`` of a square matrix, laid out like ``like`` (default: like ``x``)."""
    return _sym(x, resolve(x if like is None else like))


def lower_read(x, like=None):
    """The Hermitian matrix ``tril(x, -1) + tril(x, -1)^H + Re diag(x)`` that an operation
    reading only the lower triangle of ``x`` computes with, laid out like ``like`` (default:
    like ``x``). Linear: applied to a tangent, it makes a derivative rule the exact derivative
    of what was computed; JAX transposes it for reverse mode (the cotangent of the lower
    triangle then collects both triangles')."""
    return _lower_read(x, resolve(x if like is None else like))


def lower_read_weights(v, like=None):
    """For Hermitian ``v``: ``W = tril(conj v, -1) + Re diag(v) / 2``, the matrix with
    ``2 Re sum(W * x) = Re sum(conj(v) * H(x))`` for every ``x``, where ``H`` is :func:`lower_read`.
    It reads only v's lower triangle and is elementwise in it (no transpose): a derivative that
    pairs ``conj(v)`` with ``H(x')`` costs no matrix beyond ``v`` in either mode. The factor 2
    is left to the caller, for the scalar it pairs to: a cotangent ``g W`` is then one product
    per element, which XLA fuses into whatever consumes it."""
    sh = resolve(v if like is None else like)
    weights = _lower_half(jnp.conj(v), sh)
    if not jnp.iscomplexobj(v):
        return weights
    return jnp.where(_eye(v.shape, sh), (jnp.real(v) / 2).astype(v.dtype), weights)


def diag_embed(v, like, shape=None):
    """The matrix (square, or ``shape``) with vector ``v`` on its diagonal, laid out like ``like``."""
    return _diag_embed(v, resolve(like), None if shape is None else tuple(shape))


def tri_sandwich(t, x, like=None):
    """``T^-1 X T^-H`` for the lower triangular ``T`` stored in ``t``'s lower triangle, laid out
    like ``like`` (default: like ``t``). Where the layout imposes nothing: two triangular solves
    with ``T^T`` as the stored (upper) operand, which a row-major ``t`` is in the column-major
    layout that the device's solver reads (no transposed copy of ``t``, no inverse). Over a
    layout: :func:`tri_inv` and two distributed products, nothing gathered."""
    sh = resolve(t if like is None else like)
    if kind(sh) is None:
        upper = jnp.swapaxes(t, -1, -2)  # T^T: op(T^T) = T with transpose_a
        y = jax.lax.linalg.triangular_solve(upper, x, left_side=True, lower=False, transpose_a=True)
        return jax.lax.linalg.triangular_solve(upper, y, left_side=False, lower=False, conjugate_a=True)
    inverse = tri_inv(t, lower=True, like=sh)
    return matmul(matmul(inverse, x, sh), inverse, sh, adj_y=True)


def tri_inv(t, *, lower: bool = True, like=None, max_block: int = 2048):
    """Inverse of a square triangular matrix, laid out like ``like`` (default: like ``t``).

    Without a layout: one ``triangular_solve`` against the identity. With one,
    the matrix is never gathered: the ``nb`` diagonal blocks (``nb`` a multiple
    of the mesh axis sizes dividing n; blocks of at most ``max_block`` rows where
    possible) are inverted as a sharded batch, then merged pairwise,
    ``ceil(log2 nb)`` times, with the block formula

        [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]

    applied to the whole matrix at once: with ``Y`` the block-diagonal inverse so
    far and ``C`` the masked off-diagonal blocks of the current pairs,
    ``Y <- Y - Y C Y`` (two distributed matmuls per level). This is the
    recursive inversion method, whose error bounds are those of the usual
    blocked methods. If n cannot be split evenly over the layout, the matrix is
    replicated and inverted in one piece (a gather).
    """
    return _tri_inv(t, resolve(t if like is None else like), lower, max_block)
