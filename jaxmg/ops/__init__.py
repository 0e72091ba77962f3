"""One module per operation: argument checks, layout resolution and backend dispatch."""

from .cholesky import cholesky
from .gesvd import gesvd
from .least_squares import least_squares
from .lu_solve import lu_solve
from .polar import polar
from .potrs import potrs
from .qr import qr
from .sygvd import sygvd
from .syevd import syevd

__all__ = ["cholesky", "gesvd", "least_squares", "lu_solve", "polar", "potrs", "qr", "sygvd", "syevd"]
