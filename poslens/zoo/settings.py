"""The settings of a zoo family's training (:class:`ZooSettings`), apart from the trainer.

They live here, without torch, so that ``poslens zoo --help`` can show their defaults without
loading the trainer (:mod:`poslens.zoo.train`, which re-exports them).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field

from poslens.errors import AdvisedWarning, InputError
from poslens.options import DEFAULTS
from poslens.zoo.family import MEMBERS, member_config, parse_members

#: The learning-rate schedules after the warmup.
SCHEDULES = ("cosine", "constant")
#: The tasks a family trains on: the standard library's text (bytes) or Bigram-Backcopy (:mod:`poslens.zoo.backcopy`).
TASKS = ("stdlib", "bigram-backcopy")


class WarmupWarning(AdvisedWarning):
    """A family whose steps do not pass its warmup: the learning rate never leaves its linear ramp.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     _ = ZooSettings(steps=20, warmup=100)
        >>> caught[0].category.__name__, str(caught[0].message)[:46]
        ('WarmupWarning', 'steps = 20 is not above warmup = 100: the lear')
    """


@dataclass(frozen=True)
class ZooSettings:
    """Everything a family's training depends on (the defaults are sized for one GPU).

    Attributes:
        task: ``stdlib`` (the standard library's text, byte tokens) or ``bigram-backcopy`` (:mod:`poslens.zoo.backcopy`).
        members: Member names (:data:`poslens.zoo.family.MEMBERS`).
        seeds: Seeds; each gives the initial weights and the data order, shared by every member.
        steps: Training steps (each run takes the same number).
        seq_len: Tokens per training sequence T, BOS included.
        window: The sliding member's window in keys, 2 to T; ``None``: T / 8.
        width: Hidden size.
        depth: Layers.
        heads: Attention heads per layer.
        batch_size: Sequences per step.
        lr: Peak learning rate.
        warmup: Linear warmup steps.
        schedule: ``cosine`` (to a tenth of ``lr``) or ``constant`` after the warmup.
        weight_decay: AdamW's weight decay.
        grad_clip: Largest gradient norm.
        eval_every: Steps between checkpoints (the first is at step 0, the last at the final step).
        eval_seqs: Held-out sequences per checkpoint (loss and sink scores).
        tau: Sink-score threshold τ of the sink count.
        held_out: The held-out fraction of the documents' hash range.
        time_budget: Seconds of training per run (the family stops after ``time_budget`` × runs); ``None``: steps only.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda[:i]``.
        save_checkpoints: Also save each checkpoint's weights, under ``<run>/checkpoints/step-<n>/``.
        max_documents: Keep only the first this many documents (tiny test families; ``stdlib`` only); ``None``: all.

    Example:
        >>> s = ZooSettings(steps=10, seq_len=64)
        >>> s.members, s.seeds, s.runs()[:2]
        (('standard', 'large-base-trained', 'sliding'), (0, 1), [('standard', 0), ('large-base-trained', 0)])
    """

    task: str = "stdlib"
    members: tuple[str, ...] = tuple(MEMBERS)
    seeds: tuple[int, ...] = (0, 1)
    steps: int = 3000
    seq_len: int = 512
    window: int | None = None
    width: int = 256
    depth: int = 4
    heads: int = 4
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 100
    schedule: str = "cosine"
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    eval_seqs: int = 32
    tau: float = DEFAULTS.tau
    held_out: float = 0.1
    time_budget: float | None = None
    device: str = "auto"
    save_checkpoints: bool = False
    max_documents: int | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", parse_members(self.members))
        object.__setattr__(self, "seeds", tuple(dict.fromkeys(int(s) for s in self.seeds)))
        if not self.seeds:
            raise InputError("no seed given; pass at least one (two or more measure the training variance)")
        if self.task not in TASKS:
            raise InputError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task != "stdlib" and self.max_documents is not None:
            raise InputError(f"max_documents chooses documents of the stdlib task; the {self.task} task has none (leave it unset)")
        if self.schedule not in SCHEDULES:
            raise InputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        for name in ("steps", "seq_len", "batch_size", "eval_every", "eval_seqs"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seq_len < 4:
            raise InputError(f"seq_len must be at least 4 (BOS and a few tokens), got {self.seq_len}")
        if self.window is not None and not 2 <= self.window <= self.seq_len:
            raise InputError(f"window must lie between 2 keys and seq_len = {self.seq_len}, got {self.window}")
        if self.time_budget is not None and not self.time_budget > 0:
            raise InputError(f"time_budget must be a positive number of seconds per run, or None; got {self.time_budget}")
        if not 0 < self.tau <= 1:
            raise InputError(f"tau must lie in (0, 1], got {self.tau}")
        if self.steps <= self.warmup and self.time_budget is None:
            text = (
                f"steps = {self.steps} is not above warmup = {self.warmup}: the learning rate never leaves its linear warmup "
                f"(it ends at {self.steps / max(self.warmup, 1):.0%} of lr), so the family barely trains; pass a warmup below the steps "
                "({warmup})"
            )
            warnings.warn(WarmupWarning(text, {"warmup": self.steps // 10}, {"warmup": self.warmup}), stacklevel=3)
        member_config(self.members[0], self.width, self.depth, self.heads, self.seq_len)  # checks the sizes

    def runs(self) -> list[tuple[str, int]]:
        """Every (member, seed) run, seed by seed.

        Returns:
            The runs.

        Example:
            >>> ZooSettings(members=("sliding",), seeds=(0, 1)).runs()
            [('sliding', 0), ('sliding', 1)]
        """
        return [(member, seed) for seed in self.seeds for member in self.members]

    def to_dict(self) -> dict:
        """The settings as a JSON-ready dict (what ``zoo.json`` records and a rerun compares).

        Returns:
            The dict.

        Example:
            >>> ZooSettings().to_dict()["members"]
            ['standard', 'large-base-trained', 'sliding']
        """
        record = asdict(self)
        if record["window"] is None:  # families trained before the window could be set recorded none: they still resume
            del record["window"]
        return json.loads(json.dumps(record))
