"""The divergence guard: turning a runaway loss into a clear error.

Two checks, both on the host after each compiled call:

- Non-finite steps (:func:`raise_if_diverged`). Detection happens inside the
  compiled chunk (:func:`~sparsegcn.train.run_epoch` freezes a seed at its
  last finite state and flags the step in the ``diverged`` metric).
- Finite growth (:func:`raise_if_loss_grew`). A loss can run away without
  ever overflowing: ``--lr 1e6`` takes Cora's loss from 2 to 1e13 and used
  to finish with exit 0. A seed whose training loss stays above
  ``factor`` times its first epoch's loss (or the task's chance-level
  loss where that is lower: an epoch of many steps averages a blow-up into
  its first loss) for ``epochs`` epochs in a row (defaults :data:`~sparsegcn.train.state.DIVERGENCE_FACTOR` = 100 and
  :data:`~sparsegcn.train.state.DIVERGENCE_EPOCHS` = 10) is stopped.
  False-positive risk: a run whose first loss is already near zero (a
  warm start on an easy task, a loss scaled down by the caller) can
  legitimately exceed 100x that value for a while; raise the factor or
  turn the check off (``TrainConfig(divergence_factor=None)``,
  ``sparsegcn train --divergence-factor 0``). A cross-entropy loss that
  starts near ``ln C`` and stays above ``100 ln C`` for ten epochs has
  no such excuse.

Either raises :class:`DivergenceError`, which names the epoch, the seed,
the offending values and the usual causes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TROUBLESHOOTING = "docs/troubleshooting.md, section 'Training diverged'"

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
      reason: for a finite runaway loss, how it grew (``""`` for a
        non-finite step).
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
        reason: str = "",
    ):
        self.epoch = epoch
        self.seed = seed
        self.loss = loss
        self.grad_norm = grad_norm
        self.diverged_seeds = tuple(diverged_seeds)
        self.member = member
        self.context = context
        self.reason = reason
        causes = "".join(f"\n  - {cause}" for cause in LIKELY_CAUSES)
        others = ""
        if len(self.diverged_seeds) > 1:
            others = f" (seeds diverged in the same call: {list(self.diverged_seeds)})"
        where = f"seed {seed}, {context}" if context else f"seed {seed}"
        if reason:
            what = f"{reason}; training stopped"
        else:
            what = (
                f"the loss is {loss} and the gradient norm is {grad_norm}. The step was "
                f"discarded and training stopped"
            )
        super().__init__(
            f"training diverged at epoch {epoch} ({where}){others}: {what}. Likely "
            f"causes:{causes}\nSee {TROUBLESHOOTING}."
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
            reason=self.reason,
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


def raise_if_not_finite(metrics: dict, seeds: Sequence[int]) -> None:
    """Raises :class:`DivergenceError` if a training loss or gradient norm is not finite.

    For trainers whose programs do not discard a non-finite step themselves
    (those that do flag it in ``diverged``, :func:`raise_if_diverged`): the
    step was applied, and training stops after the call in which it happened.

    Args:
      metrics: one call's metrics as NumPy arrays ``[chunk, K]`` with keys
        ``loss``, ``active``, ``epoch`` and, where the trainer records it,
        ``grad_norm``.
      seeds: the ``K`` integer seeds, in member order.
    """
    loss = np.asarray(metrics["loss"], np.float64)
    norm = np.asarray(metrics.get("grad_norm", np.full(loss.shape, np.nan)), np.float64)
    bad = ~np.isfinite(loss)
    if "grad_norm" in metrics:
        bad |= ~np.isfinite(norm)
    bad &= np.asarray(metrics["active"], bool)
    if not bad.any():
        return
    rows, members = np.nonzero(bad)
    first = int(np.argmin(rows))
    row, member = int(rows[first]), int(members[first])
    seed_list = [int(s) for s in seeds]
    value = float(loss[row, member])
    raise DivergenceError(
        epoch=int(metrics["epoch"][row, member]),
        seed=seed_list[member],
        loss=value,
        grad_norm=float(norm[row, member]),
        diverged_seeds=sorted({seed_list[m] for m in members.tolist()}),
        member=member,
        reason=f"the training loss is {value} and the gradient norm {float(norm[row, member])}"
        if "grad_norm" in metrics
        else f"the training loss is {value}",
    )


def _reference_text(first, chance, member: int) -> str:
    """What a seed's loss was compared with, for the message."""
    own = float(first[member])
    if chance is None or own <= abs(float(chance)):
        return f"its first epoch's {own:.6g}"
    return f"the chance-level loss {abs(float(chance)):.6g} (its first epoch's was {own:.6g})"


def raise_if_loss_grew(
    history: dict,
    seeds: Sequence[int],
    *,
    factor: float | None,
    epochs: int,
    chance: float | None = None,
) -> None:
    """Raises :class:`DivergenceError` if a seed's finite loss ran away.

    A seed diverges when its training loss exceeds ``factor`` times its
    reference for ``epochs`` consecutive epochs in which it trained (see
    the module docstring for the false-positive risk). The reference is the
    first recorded epoch's loss, or ``chance`` where that is lower: the
    loss of an uninformative prediction (``ln C`` for ``C`` classes). An
    epoch of many steps averages the steps after a blow-up into its first
    loss, which ``chance`` bounds.

    Args:
      history: the run's metrics so far as NumPy arrays ``[E, K]``, with
        keys ``loss``, ``grad_norm``, ``active`` and ``epoch``.
      seeds: the ``K`` integer seeds, in member order.
      factor: the growth factor (> 1); ``None`` turns the check off.
      epochs: how many consecutive epochs above ``factor * reference`` it takes.
      chance: the task's chance-level loss, or ``None`` (the first epoch's alone).
    """
    if factor is None:
        return
    loss = np.asarray(history["loss"], np.float64)
    if loss.shape[0] < epochs:
        return
    active = np.asarray(history["active"], bool)
    # The first epoch each seed trained in; its loss is the reference.
    first = np.abs(loss[np.argmax(active, axis=0), np.arange(loss.shape[1])])
    reference = first if chance is None else np.minimum(first, abs(float(chance)))
    above = active & (loss > factor * reference[None, :])
    # Length of the run of consecutive epochs above the threshold ending at each
    # epoch: the distance to the latest epoch that was not above it.
    index = np.arange(above.shape[0])[:, None]
    runs = index - np.maximum.accumulate(np.where(above, -1, index), axis=0)
    hit = runs >= epochs
    if not hit.any():
        return
    rows, members = np.nonzero(hit)
    first_hit = int(np.argmin(rows))
    row, member = int(rows[first_hit]), int(members[first_hit])
    seed_list = [int(s) for s in seeds]
    grown = float(loss[row, member])
    raise DivergenceError(
        epoch=int(history["epoch"][row, member]),
        seed=seed_list[member],
        loss=grown,
        grad_norm=float(history["grad_norm"][row, member]),
        diverged_seeds=sorted({seed_list[m] for m in members.tolist()}),
        member=member,
        reason=(
            f"the loss is {grown:.6g}, above {factor:g}x {_reference_text(first, chance, member)} "
            f"for {epochs} epochs in a row (the finite divergence guard; --divergence-factor "
            f"sets the factor, 0 turns it off)"
        ),
    )
