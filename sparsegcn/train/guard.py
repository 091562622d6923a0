"""The divergence guard: turning a non-finite step into a clear error.

Detection happens inside the compiled chunk (:func:`~sparsegcn.train.run_epoch`
freezes a seed at its last finite state and flags the step in the
``diverged`` metric); this module reads those flags on the host after each
compiled call and raises :class:`DivergenceError`, which names the epoch,
the seed, the offending values and the usual causes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TROUBLESHOOTING = "README.md, section 'Troubleshooting: training diverged'"

LIKELY_CAUSES = (
    "the learning rate is too high (lower --lr, e.g. by 10x, or clip gradients with "
    "--clip-norm 1.0)",
    "the features are not normalized (--normalize-features row or auto, or "
    "standardize features whose values are large)",
    "the graph is not normalized or lacks self-loops: raw sums over high-degree nodes "
    "grow without bound, and a hand-made D^-1/2 divides by zero at isolated nodes (GCN "
    "expects gcn_norm(graph), which adds self-loops and maps a zero degree to 0)",
)


class DivergenceError(FloatingPointError):
    """Training produced a non-finite loss or gradient.

    Attributes:
      epoch: the 1-based epoch whose step was not finite (it was discarded:
        the seed's state is the one after ``epoch - 1``).
      seed: the integer seed of the first diverged member.
      loss: that step's loss.
      grad_norm: that step's global gradient norm.
      diverged_seeds: every seed that diverged in the same compiled call.
      member: index of the first diverged member along the ``[K]`` axis.
      context: extra words naming the run (e.g. a sweep point), or ``""``.
    """

    def __init__(
        self,
        epoch: int,
        seed: int,
        loss: float,
        grad_norm: float,
        diverged_seeds,
        *,
        member: int = 0,
        context: str = "",
    ):
        self.epoch = epoch
        self.seed = seed
        self.loss = loss
        self.grad_norm = grad_norm
        self.diverged_seeds = tuple(diverged_seeds)
        self.member = member
        self.context = context
        causes = "".join(f"\n  - {cause}" for cause in LIKELY_CAUSES)
        others = ""
        if len(self.diverged_seeds) > 1:
            others = f" (seeds diverged in the same call: {list(self.diverged_seeds)})"
        where = f"seed {seed}, {context}" if context else f"seed {seed}"
        super().__init__(
            f"training diverged at epoch {epoch} ({where}){others}: the loss is {loss} "
            f"and the gradient norm is {grad_norm}. The step was discarded and training "
            f"stopped. Likely causes:{causes}\nSee {TROUBLESHOOTING}."
        )

    def with_context(self, context: str) -> DivergenceError:
        """The same error with ``context`` added to its message."""
        return DivergenceError(
            self.epoch,
            self.seed,
            self.loss,
            self.grad_norm,
            self.diverged_seeds,
            member=self.member,
            context=context,
        )


def raise_if_diverged(metrics: dict, seeds: Sequence[int]) -> None:
    """Raises :class:`DivergenceError` if any step of a compiled call diverged.

    Args:
      metrics: one call's metrics as NumPy arrays ``[chunk, K]`` with keys
        ``diverged``, ``epoch``, ``loss`` and ``grad_norm``.
      seeds: the ``K`` integer seeds, in member order.
    """
    diverged = np.asarray(metrics["diverged"], bool)
    if not diverged.any():
        return
    rows, members = np.nonzero(diverged)
    first = int(np.argmin(rows))  # the earliest epoch; ties go to the first member
    row, member = int(rows[first]), int(members[first])
    seed_list = [int(s) for s in seeds]
    raise DivergenceError(
        epoch=int(metrics["epoch"][row, member]),
        seed=seed_list[member],
        loss=float(metrics["loss"][row, member]),
        grad_norm=float(metrics["grad_norm"][row, member]),
        diverged_seeds=sorted({seed_list[m] for m in members.tolist()}),
        member=member,
    )
