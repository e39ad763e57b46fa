"""The parts of the study, each a function from settings to a saved tidy table.

Every part writes ``DIR/<part>.parquet`` (and ``.csv``) whose metadata holds
the settings it depends on (``meta["settings"]``) and a key of them. A rerun
into the same folder reuses a part whose settings match; a part made with
other settings is never overwritten: the command stops with
:class:`SettingsMismatchError`, naming each differing setting. Every CLI
command and ``poslens report`` go through :class:`Study`.

Batch size, one policy for every command: ``Settings.batch_size`` is an upper
bound and a setting of the part (float32 forwards can differ in the last bits
with the batch size); ``Settings.max_memory`` (default ``"free"``) lets
:func:`poslens.measure` lower it to what fits
(:func:`poslens.runtime.memory.choose_batch_size`), and the batch size used is
recorded in the part's metadata. Nothing else picks a batch size.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from poslens.measurement.pipeline import measure
from poslens.measurement.result import Result
from poslens.mechanisms import sinks
from poslens.mechanisms.architectures import Case, compare, default_cases
from poslens.mechanisms.effects import reduction
from poslens.mechanisms.interventions import BosReplacement, SinkAblation
from poslens.model.corpus import make_corpus
from poslens.model.loading import load_model
from poslens.runtime import distributed


@dataclass(frozen=True)
class Settings:
    """Everything a study part depends on. ``quick()`` and ``full()`` give the two presets.

    Example:
        >>> Settings.quick().n_seqs, Settings.full().seq_len
        (16, 256)
    """

    model: str = "smollm2-135m"
    variant: str = "base"
    corpus: str = "docs"
    n_seqs: int = 16
    seq_len: int = 128
    groups: int = 8
    early: int = 32
    seed: int = 0
    batch_size: int = 4
    max_memory: str = "free"
    position0: str = "bos"
    dtype: str = "float32"
    device_map: str | None = None
    tau: float = 0.3
    replacements: tuple[str, ...] = ("mean", "zero", "noise", "token:eos")
    fingerprint_seqs: int = 16
    fingerprint_len: int = 48
    compare_seqs: int = 8
    compare_len: int = 640
    compare_quick: bool = True
    cases: tuple[Case, ...] = field(default=())

    @classmethod
    def quick(cls, **overrides: Any) -> "Settings":
        """The quick preset (minutes on a laptop CPU): the defaults, with ``overrides``.

        Example:
            >>> s = Settings.quick(model="gemma3-270m")
            >>> s.model, s.n_seqs, s.seq_len, s.compare_quick
            ('gemma3-270m', 16, 128, True)
        """
        return cls(**overrides)

    @classmethod
    def full(cls, **overrides: Any) -> "Settings":
        """The full preset, sized to finish within an hour on 2 CPU cores, with ``overrides``.

        Sizes come from the quick run's interval widths (docs/findings.md): twice
        the sequences and length for the measured parts, twice the sequences
        for the architecture comparison, and the quick preset's four cases (more
        sequences before more cases: each C4 comparison needs narrow intervals).

        Example:
            >>> s = Settings.full(seq_len=512)
            >>> s.n_seqs, s.seq_len, s.compare_seqs, s.compare_len, s.compare_quick
            (32, 512, 16, 640, True)
        """
        base = dict(
            n_seqs=32, seq_len=256, fingerprint_seqs=64, fingerprint_len=64,
            compare_seqs=16, compare_len=640, compare_quick=True,
        )
        return cls(**{**base, **overrides})

    def key(self, *names: str) -> str:
        """A short hash of the named settings (all if none).

        Example:
            >>> Settings().key("model", "n_seqs")
            'c348ecbb9faf360e'
            >>> Settings(tau=0.5).key(*MEASURE_KEYS) == Settings().key(*MEASURE_KEYS)  # τ is not a measuring setting
            True
        """
        values = asdict(self)
        chosen = {n: values[n] for n in (names or sorted(values))}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:16]


MEASURE_KEYS = ("model", "variant", "corpus", "n_seqs", "seq_len", "groups", "early", "seed", "batch_size", "position0", "dtype")

#: The command-line option of each setting, for messages that tell the user what to type.
OPTION_NAMES = {
    "model": "--model", "variant": "--variant", "corpus": "--corpus", "n_seqs": "--n-seqs", "seq_len": "--seq-len",
    "groups": "--groups", "early": "--early", "seed": "--seed", "batch_size": "--batch-size", "position0": "--bos",
    "dtype": "--dtype", "tau": "--tau", "replacements": "--replacement", "fingerprint_seqs": "--fingerprint-seqs",
    "fingerprint_len": "--fingerprint-len", "compare_seqs": "--compare-seqs", "compare_len": "--compare-len",
    "compare_quick": "--full", "cases": "cases",
}


class SettingsMismatchError(ValueError):
    """A saved part was made with other settings than the ones asked for; poslens does not overwrite it.

    Example:
        >>> issubclass(SettingsMismatchError, ValueError)  # the CLI prints it as one error line
        True
    """


class MixedSettingsError(ValueError):
    """Parts given to the claims were made with different settings (or record none); claims would mix them.

    Example:
        >>> issubclass(MixedSettingsError, ValueError)  # the CLI prints it as one error line
        True
    """


def _spelled(settings: dict[str, Any], names: list[str]) -> str:
    return ", ".join(f"{OPTION_NAMES.get(name, name)} {settings[name]}" for name in names)


def check_same_settings(parts: dict[str, Result]) -> None:
    """Raise :class:`MixedSettingsError` unless every two ``parts`` agree on every setting both record.

    ``parts`` maps part names (``"leakage"``, ``"compare"``, …) to results.
    Parts depend on different settings (the architecture comparison shares
    only groups, early, seed, corpus and batch size with the others), so only
    the names present in both parts' ``meta["settings"]`` are compared. A part
    without ``meta["settings"]`` (written by an older poslens) is refused.

    Example:
        >>> import pandas as pd
        >>> small = Result(pd.DataFrame(), {"settings": {"n_seqs": 2, "seq_len": 32, "tau": 0.3}})
        >>> large = Result(pd.DataFrame(), {"settings": {"n_seqs": 16, "seq_len": 128, "tau": 0.3}})
        >>> check_same_settings({"leakage": large, "sinks": large})
        >>> try:
        ...     check_same_settings({"leakage": small, "bos-swap": large})
        ... except MixedSettingsError as error:
        ...     print(error)
        leakage.parquet (--n-seqs 2, --seq-len 32) and bos-swap.parquet (--n-seqs 16, --seq-len 128) were made with
        different settings; claims would mix them. Remeasure one of them into its own --out.
    """
    unrecorded = [name for name, part in parts.items() if not part.meta.get("settings")]
    if unrecorded:
        listed = ", ".join(f"{name}.parquet" for name in unrecorded)
        raise MixedSettingsError(
            f"{listed} record(s) no settings (written by an older poslens), so claims cannot check that they match the "
            f"other parts. Measure again: " + ", ".join(f"poslens {name}" for name in unrecorded) + " into a new --out.")
    conflicts = []
    names = list(parts)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            a, b = parts[first].meta["settings"], parts[second].meta["settings"]
            differing = [name for name in a if name in b and a[name] != b[name]]
            if differing:
                conflicts.append(f"{first}.parquet ({_spelled(a, differing)}) and {second}.parquet ({_spelled(b, differing)}) "
                                 "were made with different settings")
    if conflicts:
        raise MixedSettingsError("; ".join(conflicts) + "; claims would mix them. Remeasure one of them into its own --out.")


def _settings_values(settings: Settings, names: tuple[str, ...]) -> dict[str, Any]:
    values = asdict(settings)
    return {name: json.loads(json.dumps(values[name], default=str)) for name in names}


def complete_parts(out: str | Path, settings: Settings, names: list[str]) -> list[str]:
    """The parts among ``names`` saved in ``out`` with ``settings``: those a rerun would reuse.

    Example:
        >>> complete_parts("no/such/folder", Settings(), ["leakage", "sinks"])
        []
    """
    complete = []
    for name in names:
        path = Path(out) / f"{name}.parquet"
        try:
            saved = Result.load(path).meta.get("settings") if path.exists() else None
        except Exception:  # unreadable: a rerun computes it again
            saved = None
        if saved and saved == _settings_values(settings, tuple(saved)):
            complete.append(name)
    return complete


def mismatch_message(path: Path, saved: dict[str, Any] | None, wanted: dict[str, Any]) -> str:
    """The message for a part at ``path`` made with ``saved`` settings when ``wanted`` were asked for.

    Example:
        >>> print(mismatch_message(Path("out/leakage.parquet"), {"n_seqs": 32, "seq_len": 256},
        ...                        {"n_seqs": 16, "seq_len": 256}))
        out/leakage.parquet was made with other settings: --n-seqs 32 there, 16 now.
        poslens does not overwrite it: pass the same settings, or choose another --out.
    """
    if not saved:
        differing = "settings this version of poslens cannot read"
    else:
        differing = ", ".join(
            f"{OPTION_NAMES.get(name, name)} {saved.get(name, '(not recorded)')} there, {value} now"
            for name, value in wanted.items()
            if saved.get(name) != value
        )
    return (f"{path} was made with other settings: {differing}. poslens does not overwrite it: "
            "pass the same settings, or choose another --out.")


def cached_part(
    out: Path, name: str, settings: Settings, names: tuple[str, ...], compute: Callable[[], Result],
    log: Callable[[str], None] = print,
) -> Result:
    """Load ``out/name.parquet`` if it was made with the same values of the settings ``names``, else compute and save it.

    A part made with other values is not overwritten: :class:`SettingsMismatchError`
    names each differing setting. An unreadable part (say, a truncated file) is
    computed again, and the log says so.

    Example:
        >>> cached_part(Path("results"), "leakage", settings, MEASURE_KEYS, lambda: ...)  # doctest: +SKIP
    """
    path = Path(out) / f"{name}.parquet"
    key = settings.key(*names)
    wanted = _settings_values(settings, names)
    if path.exists():
        try:
            previous = Result.load(path)
        except Exception as error:  # an unreadable part is computed again, loudly
            log(f"[{name}] {path} cannot be read ({type(error).__name__}: {error}); computing it again")
        else:
            if previous.meta.get("settings_key") == key:
                log(f"[{name}] reusing {path}")
                return previous
            raise SettingsMismatchError(mismatch_message(path, previous.meta.get("settings"), wanted))
    log(f"[{name}] computing")
    start = time.perf_counter()
    result = compute()
    result.meta["settings_key"] = key
    result.meta["settings"] = wanted
    result.meta["part_seconds"] = time.perf_counter() - start
    if distributed.is_main():  # under torchrun, rank 0 writes
        result.save(path)
    log(f"[{name}] done in {result.meta['part_seconds']:.0f} s -> {path}")
    return result


class Study:
    """Runs and caches the study's parts for one settings object in one folder.

    Example:
        >>> study = Study(Settings.quick(), "results/quick")  # doctest: +SKIP
        >>> study.leakage().summary("early")  # doctest: +SKIP
    """

    def __init__(self, settings: Settings, out: str | Path, log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.out = Path(out)
        self.log = log
        self._model = None
        self._corpus = None

    def model(self):
        """The model of ``settings.model`` and ``settings.variant``, loaded on first use.

        Example:
            >>> model = study.model()  # doctest: +SKIP
            >>> model.name, model.n_layers, study.model() is model  # doctest: +SKIP
            ('smollm2-135m', 30, True)
        """
        if self._model is None:
            s = self.settings
            self._model = load_model(s.model, variant=s.variant, dtype=s.dtype, device_map=s.device_map)
        return self._model

    def corpus(self):
        """The corpus of the settings (position 0 as ``settings.position0`` says), made on first use.

        Example:
            >>> study.corpus().tokens.shape, study.corpus().position0  # doctest: +SKIP
            (torch.Size([16, 128]), 'bos')
        """
        if self._corpus is None:
            s = self.settings
            self._corpus = make_corpus(self.model(), s.corpus, n_seqs=s.n_seqs, seq_len=s.seq_len, position0=s.position0, seed=s.seed)
        return self._corpus

    def _measure(self, interventions=(), probe: bool = True) -> Result:
        s = self.settings
        return measure(self.model(), self.corpus(), groups=s.groups, early=s.early, batch_size=s.batch_size,
                       max_memory=s.max_memory, interventions=interventions, probe=probe)

    def leakage(self) -> Result:
        """Baseline leakage, decomposition and probe (METHOD §3–§5).

        Example:
            >>> result = study.leakage()  # doctest: +SKIP
            >>> round(result.value("c_res", "early"), 4), round(result.value("c_mask", "early"), 4)  # doctest: +SKIP
            (0.0436, 0.0158)
        """
        return cached_part(self.out, "leakage", self.settings, MEASURE_KEYS, self._measure, self.log)

    def sinks(self) -> Result:
        """Sink scores and sink-reading head counts (METHOD §6).

        Example:
            >>> study.sinks().value("sink_heads")  # sink-reading heads over all layers  # doctest: +SKIP
            164.0
        """
        base = self.leakage()
        def compute() -> Result:
            return Result(sinks.sink_table(base, self.settings.tau), dict(base.meta))

        return cached_part(self.out, "sinks", self.settings, (*MEASURE_KEYS, "tau"), compute, self.log)

    def bos_swap(self) -> Result:
        """Reduction of C_res for each BOS-embedding replacement (METHOD §7).

        Example:
            >>> rows = study.bos_swap().select("reduction", "early", layer=-1)  # doctest: +SKIP
            >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
            {'bos:mean': -0.012, 'bos:zero': 0.226, 'bos:noise': 0.06, 'bos:token:2': -0.036}
        """
        def compute() -> Result:
            base = self.leakage()
            tables, described = [], []
            for kind in self.settings.replacements:
                if kind == "token:eos":
                    kind = f"token:{self.model().tokenizer.eos_token_id}"
                swap = BosReplacement(kind, seed=self.settings.seed)
                after = self._measure([swap], probe=False)
                described.append(swap.describe())
                tables += [reduction(base, after, "c_res", w) for w in ("early", "all")]
                tables.append(after.table[after.table["metric"].isin(["c_res", "c_mask"]) & (after.table["head"] == -1)])
            return Result(pd.concat(tables, ignore_index=True), {**base.meta, "replacements": described})

        return cached_part(self.out, "bos-swap", self.settings, (*MEASURE_KEYS, "replacements"), compute, self.log)

    def ablate_sinks(self) -> Result:
        """Sink-path ablation of the sink-reading heads and the reduction of C_res (METHOD §7).

        Example:
            >>> result = study.ablate_sinks()  # doctest: +SKIP
            >>> len(result.meta["ablation"]["heads"]), round(result.value("reduction", "early"), 3)  # doctest: +SKIP
            (164, 0.433)
        """
        def compute() -> Result:
            base = self.leakage()
            heads = sinks.sink_reading_heads(base, self.settings.tau)
            if not heads:
                self.log(f"[ablate-sinks] no head has sink score ≥ τ = {self.settings.tau}: nothing to ablate")
                return Result(base.table.iloc[0:0], {**base.meta, "ablation": {"heads": [], "note": "no sink-reading head"}})
            ablation = SinkAblation(sinks.key0_means(base, heads))
            after = self._measure([ablation], probe=False)
            tables = [reduction(base, after, "c_res", w) for w in ("early", "all")]
            tables.append(after.table[after.table["metric"].isin(["c_res", "c_mask"]) & (after.table["head"] == -1)])
            return Result(pd.concat(tables, ignore_index=True), {**base.meta, "ablation": ablation.describe()})

        return cached_part(self.out, "ablate-sinks", self.settings, (*MEASURE_KEYS, "tau"), compute, self.log)

    def fingerprint(self) -> Result:
        """Position-0 fingerprint: dispersion, trajectory similarity, readout (METHOD §8).

        Example:
            >>> rows = study.fingerprint().select("dispersion", layer=-1)  # doctest: +SKIP
            >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
            {'position0:bos': 0.0, 'position0:none': 0.138}
        """
        from poslens.mechanisms.fingerprint import fingerprint

        s = self.settings
        names = ("fingerprint_seqs", "fingerprint_len", "tau", *MEASURE_KEYS)
        return cached_part(
            self.out, "fingerprint", s, names,
            lambda: fingerprint(self.model(), n_seqs=s.fingerprint_seqs, seq_len=s.fingerprint_len, groups=s.groups,
                                seed=s.seed, tau=s.tau, sink_result=self.leakage()),
            self.log,
        )

    def compare(self) -> Result:
        """C_res and C_mask by layer across standard, NTK and sliding-window cases (C4).

        Example:
            >>> rows = study.compare().select("c_res", "all", layer=-1, head=-1)  # doctest: +SKIP
            >>> list(zip(rows["model"], rows["variant"], rows["value"].round(4).tolist()))  # doctest: +SKIP
            [('smollm2-135m', 'base', 0.0098), ('smollm2-135m', 'ntk:4', 0.0094),
             ('smollm2-135m', 'window:64', 0.0137), ('gemma3-270m', 'base', 0.0043)]
        """
        s = self.settings
        cases = list(s.cases) or default_cases(quick=s.compare_quick)
        names = ("compare_seqs", "compare_len", "compare_quick", "cases", "groups", "early", "seed", "corpus", "batch_size")
        return cached_part(
            self.out, "compare", s, names,
            lambda: compare(cases, n_seqs=s.compare_seqs, seq_len=s.compare_len, groups=s.groups, early=s.early,
                            seed=s.seed, source=s.corpus, batch_size=s.batch_size, max_memory=s.max_memory),
            self.log,
        )

    def claims(self, parts: dict[str, Result]) -> pd.DataFrame:
        """Verdicts C1–C6 from whichever parts were run; writes ``claims.csv``.

        The parts must agree on every setting they share (:func:`check_same_settings`,
        else :class:`MixedSettingsError`): a claim never pairs figures of different runs.

        Example:
            >>> table = study.claims({"leakage": study.leakage(), "ablate-sinks": study.ablate_sinks()})  # doctest: +SKIP
            >>> dict(zip(table["claim"], table["verdict"]))  # doctest: +SKIP
            {'C1': 'supported', 'C2': 'supported', 'C3': 'supported', 'C4': 'not measured', 'C5': 'not measured', 'C6': 'not measured'}
        """
        from poslens.study.claims import evaluate, label_cases

        check_same_settings(parts)
        comparison = parts.get("compare")
        ablation = parts.get("ablate-sinks")
        if ablation is not None and ablation.table.empty:
            ablation = None  # no sink-reading head: C3's ablation was not measured
        table = evaluate(
            leakage=parts.get("leakage"),
            ablation=ablation,
            bos_swap=parts.get("bos-swap"),
            comparison=label_cases(comparison.table) if comparison is not None else None,
            fingerprint=parts.get("fingerprint"),
            # an imposed window of W changes nothing for queries i < W, so C4 compares all queries
            c4_window="all",
        )
        self.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(self.out / "claims.csv", index=False)
        return table

    def with_settings(self, **changes: Any) -> "Study":
        """A study in the same folder with some settings changed (a saved part made with other settings is refused, not replaced).

        Example:
            >>> study = Study(Settings.quick(), "results/quick")
            >>> longer = study.with_settings(seq_len=256)
            >>> longer.settings.seq_len, longer.out == study.out, study.settings.seq_len
            (256, True, 128)
        """
        return Study(replace(self.settings, **changes), self.out, self.log)
