"""What every factorisation module shares: its plan, the kept operator and status."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax

from .._plan import Plan
from ..kernels import status as _status


class Factorisation(eqx.Module):
    """Base of the factorisation modules.

    ``operator`` is the factorised matrix as the caller passed it (a reference, not a copy, for
    derivatives; None when the call donated it). ``status`` is 0 on success (see each module).
    ``plan`` (``jaxmg._plan.Plan``: route, mesh, layouts, tile, shape, dtype) describes the call;
    the module's methods run the same way.
    """

    operator: Optional[jax.Array]
    status: jax.Array
    plan: Plan = eqx.field(static=True)

    @property
    def shape(self) -> tuple:
        """The factorised matrix's shape."""
        return self.plan.shape

    @property
    def dtype(self):
        """The factorised matrix's dtype."""
        return self.plan.dtype

    @property
    def route(self) -> str:
        """The route the factorisation took: "local", "batch" or "distributed" (docs/routes.md)."""
        return self.plan.route

    def _masked(self, *outputs):
        """``outputs``, NaN wherever :attr:`status` is not 0 (on every backend)."""
        return _status.masked(self.status, *outputs)
