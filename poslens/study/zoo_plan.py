"""The cost of a zoo family on this project's CPU, and a family sized from the power table under a budget.

:func:`estimate_cpu_seconds` scales the recorded training time of the existing
family (docs/zoo.md: 1617 s for 3 members × 3 seeds × 6000 steps) by runs,
steps and the arithmetic of one step; :func:`plan_family` picks the seeds that
the power table (:mod:`poslens.study.zoo_power`) asks for, capped by a budget.

Example:
    >>> round(estimate_cpu_seconds(PLANNED_SHAPE) / 3600, 2)   # 3 seeds of the planned shape
    1.52
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import pandas as pd

#: The largest number of seeds searched; a comparison that needs more is reported as needing more than this.
MAX_SEEDS = 100_000
#: The columns of the power table that :func:`plan_family` reads.
PLAN_COLUMNS = ["comparison", "planned", "seeds_needed", "seeds_needed_sd_upper"]


@dataclass(frozen=True)
class FamilyShape:
    """What a family's training time depends on.

    Attributes:
        members: Members.
        seeds: Seeds (runs = members × seeds).
        steps: Training steps per run.
        width: Hidden size.
        depth: Layers.
        heads: Heads per layer (same arithmetic at a given width; recorded, not scaled).
        seq_len: T.
        batch_size: Sequences per step.
        vocab: Vocabulary size (68 for Bigram-Backcopy).

    Example:
        >>> RECORDED.members * RECORDED.seeds * RECORDED.steps
        54000
    """

    members: int
    seeds: int
    steps: int
    width: int
    depth: int
    heads: int
    seq_len: int
    batch_size: int
    vocab: int = 68

    def step_flops(self) -> float:
        """Multiply-adds of one run's training step, up to the factor common to every shape (forward + backward ≈ 3 forwards).

        Per token and layer 12·width² (attention and an MLP of 4·width) and 2·T·width (scores and their mix); per token
        2·width·vocab for the embedding's tied read-out.

        Returns:
            The count.

        Example:
            >>> FamilyShape(1, 1, 1, width=32, depth=3, heads=1, seq_len=64, batch_size=16).step_flops()
            54788096.0
        """
        w, t = self.width, self.seq_len
        return float(self.batch_size * t * (self.depth * (12 * w * w + 2 * t * w) + 2 * w * self.vocab))


#: The existing family (docs/zoo.md): 3 members × 3 seeds × 6000 steps, width 32, 3 layers × 1 head, T = 64, batch 16.
RECORDED = FamilyShape(members=3, seeds=3, steps=6000, width=32, depth=3, heads=1, seq_len=64, batch_size=16)
#: Its recorded training time on this project's 2 shared CPU cores (1 torch thread, under nice).
RECORDED_SECONDS = 1617.0


def estimate_cpu_seconds(shape: FamilyShape, recorded: FamilyShape = RECORDED, recorded_seconds: float = RECORDED_SECONDS) -> float:
    """The training time of ``shape``, the recorded family's scaled by runs × steps × the step's arithmetic.

    Tiny models spend part of a step in fixed per-call overhead that does not grow with width or T, so for a larger
    shape this scaling over-estimates rather than under-estimates.

    Args:
        shape: The planned family.
        recorded: The family whose time was recorded.
        recorded_seconds: Its time.

    Returns:
        Seconds.

    Example:
        >>> round(estimate_cpu_seconds(RECORDED))
        1617
        >>> round(estimate_cpu_seconds(replace(RECORDED, seeds=6)))   # twice the runs
        3234
    """
    work = lambda s: s.members * s.seeds * s.steps * s.step_flops()  # noqa: E731
    return recorded_seconds * work(shape) / work(recorded)


@dataclass(frozen=True)
class FamilyPlan:
    """A family sized from the power table under a CPU budget.

    Attributes:
        shape: The planned family.
        seconds: Its estimated CPU time (:func:`estimate_cpu_seconds`).
        budget: The budget, seconds.
        affordable: The most seeds of this shape that train within the budget.
        reachable: The comparisons whose planned target the planned seeds detect, the spread as measured.
        robust: Those of them that the planned seeds detect with the spread at its upper bound (:data:`poslens.study.zoo_power.SD_BOUND`) too.
        beyond: The comparisons whose planned target needs more seeds than planned, with the seeds needed (None: more
            than :data:`MAX_SEEDS`, or no target).

    Example:
        >>> plan_family(pd.DataFrame(columns=PLAN_COLUMNS)).shape.seeds   # nothing to detect: the fewest seeds, 3
        3
    """

    shape: FamilyShape
    seconds: float
    budget: float
    affordable: int
    reachable: tuple[str, ...]
    robust: tuple[str, ...]
    beyond: tuple[tuple[str, int | None], ...]

    def as_dict(self) -> dict:
        """The plan as plain data (for a JSON file or a page).

        Returns:
            The fields, the shape as a dict.

        Example:
            >>> plan_family(pd.DataFrame(columns=PLAN_COLUMNS)).as_dict()["shape"]["width"]
            64
        """
        return {**asdict(self), "shape": asdict(self.shape)}


#: The planned family apart from its seeds (issue 52: sinks in every member need width 64, 4 layers × 2 heads,
#: T = 128 and so a window of T/8 = 16); 2000 steps: twice the latest first sink of the recorded family (step 1000).
PLANNED_SHAPE = FamilyShape(members=3, seeds=3, steps=2000, width=64, depth=4, heads=2, seq_len=128, batch_size=16)
#: Three hours of the 2-core CPU.
BUDGET_SECONDS = 3 * 3600.0


def _need(value: object) -> int | None:
    return None if pd.isna(value) else int(value)  # type: ignore[call-overload]


def plan_family(power: pd.DataFrame, shape: FamilyShape = PLANNED_SHAPE, budget: float = BUDGET_SECONDS, min_seeds: int = 3) -> FamilyPlan:
    """The seeds of ``shape`` that its planned targets need, capped by what trains within ``budget``.

    A comparison whose planned target some affordable family detects (spread as measured) asks for the seeds it needs
    with the spread at its upper bound, capped by the budget; the family takes the most any such comparison asks for.
    A comparison no affordable family can decide asks for nothing and is reported in ``beyond``.

    Args:
        power: The power table (:func:`poslens.study.zoo_power.power_table`; ``planned``, ``seeds_needed`` and ``seeds_needed_sd_upper`` are read).
        shape: The family apart from its seeds (``shape.seeds`` is replaced).
        budget: CPU seconds the whole family may take.
        min_seeds: The fewest seeds planned (an interval over seeds needs 2; 3 keeps the existing family's replication).

    Returns:
        The :class:`FamilyPlan`.

    Example:
        >>> p = pd.DataFrame([dict(comparison="a", planned=True, seeds_needed=3, seeds_needed_sd_upper=5),
        ...                   dict(comparison="b", planned=True, seeds_needed=700, seeds_needed_sd_upper=3000)])
        >>> plan = plan_family(p)
        >>> plan.shape.seeds, plan.robust, plan.beyond
        (5, ('a',), (('b', 700),))
    """
    affordable = min_seeds
    while estimate_cpu_seconds(replace(shape, seeds=affordable + 1)) <= budget:
        affordable += 1
    planned = power[power["planned"].astype(bool)]
    point = {str(r.comparison): _need(r.seeds_needed) for r in planned.itertuples()}
    upper = {str(r.comparison): _need(r.seeds_needed_sd_upper) for r in planned.itertuples()}
    asks = [min(upper[c] or affordable, affordable) for c, n in point.items() if n is not None and n <= affordable]
    wanted = max([min_seeds, *asks])
    chosen = replace(shape, seeds=wanted)
    reachable = tuple(c for c, n in point.items() if n is not None and n <= wanted)
    robust = tuple(c for c in reachable if upper[c] is not None and upper[c] <= wanted)  # type: ignore[operator]
    beyond = tuple((c, n) for c, n in point.items() if n is None or n > wanted)
    return FamilyPlan(chosen, estimate_cpu_seconds(chosen), budget, affordable, reachable, robust, beyond)


__all__ = [
    "BUDGET_SECONDS",
    "MAX_SEEDS",
    "PLANNED_SHAPE",
    "PLAN_COLUMNS",
    "RECORDED",
    "RECORDED_SECONDS",
    "FamilyPlan",
    "FamilyShape",
    "estimate_cpu_seconds",
    "plan_family",
]
