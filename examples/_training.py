"""The command line that the two training examples (gp_hyperparameters.py, equinox_solve_layer.py)
share: the problem size, the optax.adam steps and learning rate, and the seed."""

from __future__ import annotations

import argparse


def parse_training_args(doc: str, *, n_help: str, steps: int, seed_help: str, lr: float, features: int | None = None):
    """``--n`` (default 512), ``--steps``, ``--seed`` (default 0) and ``--lr`` (and ``--features``
    where a default is given) of an example that trains with optax.adam; ``--steps`` must be at
    least 2 (the first step compiles, the others are timed). Returns the parser (for the example's
    own checks, ``parser.error``) and the arguments."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512, help=f"{n_help} (default 512)")
    parser.add_argument("--steps", type=int, default=steps, help=f"optax.adam steps (default {steps})")
    parser.add_argument("--seed", type=int, default=0, help=f"{seed_help} (default 0)")
    parser.add_argument("--lr", type=float, default=lr, help=f"adam learning rate (default {lr})")
    if features is not None:
        parser.add_argument("--features", type=int, default=features, help=f"feature dimension M (default {features})")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    return parser, args
