"""Runs a JAX computation before initialize_from_environment(): must fail clearly."""

import jax

jax.numpy.zeros(2).block_until_ready()
import jaxmg.launch  # noqa: E402

jaxmg.launch.initialize_from_environment()
