"""The parts of the study, each a function from settings to a saved tidy table.

Every part writes ``DIR/<part>.parquet`` (and ``.csv``, and its cell sums in
``.sums.npz``) whose metadata holds the settings it depends on
(``meta["settings"]``), the hashes of its input files (``meta["inputs"]``: the
corpus file, the model's files, see :mod:`poslens.study.inputs`) and a key of
both. A rerun into the same folder reuses a part only when both match; a part
made with other settings or from input files changed since is never reused
or overwritten: the command stops with :class:`poslens.study.part_cache.SettingsMismatchError` or
:class:`~poslens.errors.InputsChangedError`, naming each difference, unless
``overwrite`` (``--overwrite``) asks to measure it again. A file in the folder
that poslens did not write is never replaced (:mod:`poslens.ownership`). Every
CLI command and ``poslens report`` go through :class:`Study`.

Batch size, one policy for every command: ``Settings.batch_size`` is an upper
bound and a setting of the part (float32 forwards can differ in the last bits
with the batch size); ``Settings.max_memory`` (default ``"free"``) lets
:func:`poslens.measure` lower it to what fits
(:func:`poslens.runtime.planner.choose_batch_size`), and the batch size used is
recorded in the part's metadata. Nothing else picks a batch size.

The reuse and refusal of saved parts is :mod:`poslens.study.part_cache`. Longer
than 400 lines because it is one method per part of the study, each with its
corpus, model and interventions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from poslens.errors import InputError, OldLayoutError
from poslens.files import atomic_write
from poslens.measurement.pipeline import measure
from poslens.measurement.result import Result
from poslens.mechanisms import sinks
from poslens.mechanisms.architectures import default_cases
from poslens.mechanisms.effects import reduction
from poslens.mechanisms.interventions import BosReplacement, SinkAblation
from poslens.model.corpus import Corpus, make_corpus
from poslens.model.guards import check_seq_len
from poslens.model.loading import load_model
from poslens.model.pos_model import PosModel
from poslens.model.reads import recording_reads
from poslens.ownership import record_written, remove_ours, replacing
from poslens.runtime import distributed
from poslens.study.inputs import corpus_inputs, model_inputs
from poslens.study.part_cache import (
    cached_part,
    check_same_settings,
)
from poslens.study.part_registry import PARTS
from poslens.study.settings import Settings

if TYPE_CHECKING:
    from poslens.study.claim_table import Claims


class Study:
    """Runs and caches the study's parts for one settings object in one folder.

    Args:
        settings: The study's settings.
        out: The study folder, where parts, claims and the report are written.
        log: Where progress lines go.
        overwrite: Measure again parts saved with other settings or inputs, replacing their files.

    Example:
        >>> study = Study(Settings.quick(), "results/quick")  # doctest: +SKIP
        >>> study.leakage().summary("early")  # doctest: +SKIP
    """

    def __init__(self, settings: Settings, out: str | Path, log: Callable[[str], None] = print, overwrite: bool = False) -> None:
        self.settings = settings
        self.out = Path(out)
        self.log = log
        self.overwrite = overwrite
        self.written: list[Path] = []  # every file this study wrote, in order
        self._model: PosModel | None = None
        self._corpus: Corpus | None = None
        self._inputs: dict[str, str] | None = None
        self._reads: dict[str, str] = {}  # the corpus files this study read, by the hash of the bytes read

    def inputs(self) -> dict[str, str]:
        """sha256 of the files the measured parts are made from: the model's files and the corpus's, by path.

        Computed from the files alone, before any model loads (:mod:`poslens.study.inputs`); once the
        study has read the corpus, its files count by the hash of the bytes read.

        Returns:
            ``{file path: sha256}``.

        Example:
            >>> sorted(Study(Settings(corpus="random", model="no/such/model"), "out").inputs())
            []
        """
        if self._inputs is None:
            s = self.settings
            self._inputs = {**model_inputs(s.model), **corpus_inputs(s.corpus, s.text_field)}
        return {**self._inputs, **self._reads}

    def _part(self, name: str, compute: Callable[[], Result], inputs: dict[str, str] | None = None) -> Result:
        """Part ``name`` reused from the folder when its settings (declared in :data:`PARTS`) and inputs match, else computed and saved."""
        return cached_part(
            self.out,
            name,
            self.settings,
            PARTS[name].settings,
            compute,
            self.log,
            inputs=self.inputs() if inputs is None else inputs,
            overwrite=self.overwrite,
            written=self.written,
        )

    def model(self) -> PosModel:
        """The model of ``settings.model`` and ``settings.variant``, loaded on first use.

        Returns:
            The loaded :class:`~poslens.model.pos_model.PosModel`.

        Example:
            >>> model = study.model()  # doctest: +SKIP
            >>> model.name, model.n_layers, study.model() is model  # doctest: +SKIP
            ('smollm2-135m', 30, True)
        """
        if self._model is None:
            s = self.settings
            self._model = load_model(s.model, variant=s.variant, dtype=s.dtype, device_map=s.device_map)
        return self._model

    def corpus(self) -> Corpus:
        """The corpus of the settings (position 0 as ``settings.position0`` says), made on first use.

        Returns:
            The :class:`~poslens.model.corpus.Corpus`.

        Example:
            >>> study.corpus().tokens.shape, study.corpus().position0  # doctest: +SKIP
            (torch.Size([16, 128]), 'bos')
        """
        if self._corpus is None:
            s = self.settings
            model = self.model()
            with recording_reads() as reads:
                self._corpus = make_corpus(
                    model, s.corpus, n_seqs=s.n_seqs, seq_len=s.seq_len, position0=s.position0, seed=s.seed, text_field=s.text_field
                )
            self._reads.update(reads)
        return self._corpus

    def _measure(self, interventions=(), probe: bool = True) -> Result:
        s = self.settings
        result = measure(
            self.model(),
            self.corpus(),
            groups=s.groups,
            early=s.early,
            batch_size=s.batch_size,
            max_memory=s.max_memory,
            interventions=interventions,
            probe=probe,
            row_sums=s.row_sums,
            disk_budget=s.disk_budget,
        )
        route = result.meta["row_sums"]
        self.log(f"row sums: {route['route']} ({route['reason']})")
        return result

    def leakage(self) -> Result:
        """Baseline leakage, decomposition and probe (methodology §3–§5).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> result = study.leakage()  # doctest: +SKIP
            >>> round(result.value("c_res", "early"), 4), round(result.value("c_mask", "early"), 4)  # doctest: +SKIP
            (0.0436, 0.0158)
        """
        return self._part("leakage", self._measure)

    def sinks(self) -> Result:
        """Sink scores and sink-reading head counts (methodology §6).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> study.sinks().value("sink_heads")  # sink-reading heads over all layers  # doctest: +SKIP
            164.0
        """
        base = self.leakage()

        def compute() -> Result:
            return Result(sinks.sink_table(base, self.settings.tau), dict(base.meta))

        return self._part("sinks", compute)

    def bos_swap(self) -> Result:
        """Reduction of C_res for each BOS-embedding replacement (methodology §7).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> rows = study.bos_swap().select("reduction", "early", layer=-1)  # doctest: +SKIP
            >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
            {'bos:mean': -0.012, 'bos:zero': 0.226, 'bos:noise': 0.06, 'bos:token:2': -0.036}
        """
        base = self.leakage()  # first: a leakage part that cannot be used stops the command before any swap runs

        def compute() -> Result:
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

        return self._part("bos-swap", compute)

    def ablate_sinks(self) -> Result:
        """Sink-path ablation of the sink-reading heads and the reduction of C_res (methodology §7).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> result = study.ablate_sinks()  # doctest: +SKIP
            >>> len(result.meta["ablation"]["heads"]), round(result.value("reduction", "early"), 3)  # doctest: +SKIP
            (164, 0.433)
        """
        base = self.leakage()  # first, as in bos_swap

        def compute() -> Result:
            heads = sinks.sink_reading_heads(base, self.settings.tau)
            if not heads:
                self.log(f"[ablate-sinks] no head has sink score ≥ τ = {self.settings.tau}: nothing to ablate")
                return Result(base.table.iloc[0:0], {**base.meta, "ablation": {"heads": [], "note": "no sink-reading head"}})
            ablation = SinkAblation(sinks.key0_means(base, heads))
            after = self._measure([ablation], probe=False)
            tables = [reduction(base, after, "c_res", w) for w in ("early", "all")]
            tables.append(after.table[after.table["metric"].isin(["c_res", "c_mask"]) & (after.table["head"] == -1)])
            return Result(pd.concat(tables, ignore_index=True), {**base.meta, "ablation": ablation.describe()})

        return self._part("ablate-sinks", compute)

    def path_tests(self) -> Result:
        """The path-specific causal tests: the key-0 phase freeze, its key-1 sham, the mask-only sink profile (methodology §12).

        Runs on the leakage part's corpus and groups, with the leakage part as the
        unedited baseline (its sink-reading heads at τ and its cross-fitted absolute
        component), one full forward pass per edit: offsets D = ``path_offsets``
        (default 8, 64 and T/2), the sham at each, the mask-only profile at each dose
        of ``path_doses``, and the sink-path ablation.

        Returns:
            The part's tidy result (:func:`~poslens.mechanisms.path_tests.path_specific_tests`), reused from the folder
            when it matches.

        Example:
            >>> fall = study.path_tests().table.query("metric == 'resid_probe_r2_ge2' and kind == 'difference'")  # doctest: +SKIP
        """
        from poslens.mechanisms.path_tests import path_specific_tests

        base = self.leakage()  # first: the baseline, reused when saved

        def compute() -> Result:
            s = self.settings
            return path_specific_tests(
                self.model(),
                self.corpus(),
                offsets=s.path_offsets or None,
                doses=s.path_doses,
                groups=s.groups,
                early=s.early,
                batch_size=int(base.meta.get("settings", {}).get("batch_size") or s.batch_size),  # the leakage part's batches
                tau=s.tau,
                baseline=base,
                progress=True,
            )

        return self._part("path-tests", compute)

    def sink_split(self) -> Result:
        """The sink path's split (methodology §13): its share of the residual stream's position, mask count versus key-0 phase.

        Runs on the leakage part's corpus and groups, in its sink-reading heads at τ, one full forward pass per edit
        (:func:`~poslens.mechanisms.sink_split.sink_path_split`): m, p at D = ``split_offset``, mp, s, each factor's sham,
        and the key-0 phase frozen in every head.

        Returns:
            The part's tidy result, reused from the folder when it matches; ``meta["c8"]`` holds C8's verdict.

        Example:
            >>> study.sink_split().meta["c8"]["verdict"]  # doctest: +SKIP
            'undecided'
        """
        from poslens.mechanisms.sink_split import sink_path_split

        base = self.leakage()  # first: its sink-reading heads, reused when saved

        def compute() -> Result:
            s = self.settings
            return sink_path_split(
                self.model(),
                self.corpus(),
                offset=s.split_offset,
                groups=s.groups,
                early=s.early,
                batch_size=int(base.meta.get("settings", {}).get("batch_size") or s.batch_size),  # the leakage part's batches
                tau=s.tau,
                baseline=base,
                progress=True,
            )

        return self._part("sink-split", compute)

    def fingerprint(self) -> Result:
        """Position-0 fingerprint: dispersion, trajectory similarity, readout (methodology §8).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> rows = study.fingerprint().select("dispersion", layer=-1)  # doctest: +SKIP
            >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
            {'position0:bos': 0.0, 'position0:none': 0.138}
        """
        from poslens.mechanisms.fingerprint import fingerprint

        s = self.settings
        check_seq_len(
            self.model(),
            s.fingerprint_len,
            option="--fingerprint-len",  # before the leakage part is measured
            parameter="fingerprint_len= of Settings or Study.with_settings",
        )
        return self._part(
            "fingerprint",
            lambda: fingerprint(
                self.model(),
                n_seqs=s.fingerprint_seqs,
                seq_len=s.fingerprint_len,
                groups=s.groups,
                seed=s.seed,
                tau=s.tau,
                sink_result=self.leakage(),
            ),
        )

    def compare(self) -> Result:
        """C_res and C_mask by layer across standard, NTK and sliding-window cases (C4).

        Also makes the comparisons part (:meth:`comparisons`): the comparisons among the cases need the cases'
        cell sums, which are at hand only while they are measured.

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Example:
            >>> rows = study.compare().select("c_res", "all", layer=-1, head=-1)  # doctest: +SKIP
            >>> list(zip(rows["model"], rows["variant"], rows["value"].round(4).tolist()))  # doctest: +SKIP
            [('smollm2-135m', 'base', 0.0098), ('smollm2-135m', 'ntk:4', 0.0094),
             ('smollm2-135m', 'window:64', 0.0137), ('gemma3-270m', 'base', 0.0043)]
        """
        return self._compare_parts()[0]

    def comparisons(self) -> Result:
        """The comparisons among compare's cases by the interval of their difference (C4, methodology §9.1).

        Paired differences of each variant against its model's base, trends over ``ntk:α`` and ``window:W``, depth
        slopes and independent differences between models (:func:`~poslens.mechanisms.comparisons.compare_figures`):
        the part ``comparisons.parquet``, made with the compare part. Beside a compare part of table format 1, which
        kept them in its metadata, they are read from there; beside one of table format 2 saved without them, the
        cases are measured again.

        Returns:
            The part's tidy result (:data:`~poslens.mechanisms.comparison_rows.COMPARISON_COLUMNS`), reused from the
            folder when it matches.

        Example:
            >>> study.comparisons().table.query("kind == 'paired' and metric == 'c_res' and layer == -1")  # doctest: +SKIP
        """
        return self._compare_parts()[1]

    def _compare_parts(self) -> tuple[Result, Result]:
        """The compare part and its comparisons part, each reused from the folder or made (the two together)."""
        from poslens.mechanisms.architectures import compare_cases
        from poslens.mechanisms.comparisons import META_KEY, comparison_table

        s = self.settings
        cases = list(s.cases) or default_cases(quick=s.compare_quick)
        inputs = corpus_inputs(s.corpus, s.text_field)
        for case in cases:
            inputs.update(model_inputs(case.model))

        def measured() -> tuple[Result, Result]:
            return compare_cases(
                cases,
                n_seqs=s.compare_seqs,
                seq_len=s.compare_len,
                groups=s.groups,
                early=s.early,
                seed=s.seed,
                source=s.corpus,
                batch_size=s.batch_size,
                max_memory=s.max_memory,
                text_field=s.text_field,
                row_sums=s.row_sums,
                disk_budget=s.disk_budget,
            )

        made: list[Result] = []

        def compute_cases() -> Result:
            result, comparisons = measured()
            made.append(comparisons)
            return result

        result = self._part("compare", compute_cases, inputs)

        def compute_comparisons() -> Result:
            if made:  # measured just now
                return made[0]
            if META_KEY in result.meta:  # a compare part of table format 1: its comparisons were kept in its meta
                meta = {k: v for k, v in result.meta.items() if k != META_KEY}
                return Result(comparison_table(result), meta)
            self.log("[comparisons] the compare part was saved without its comparisons: measuring the cases again")
            return measured()[1]

        return result, self._part("comparisons", compute_comparisons, inputs)

    def relativize(self) -> Result:
        """Cumulative attribution: every layer relativized in each mode, each measured before its own edit (methodology §11).

        The edit is fitted on a calibration corpus of the same source and length
        and another seed (``calibration_seed``, default ``seed + 1``), disjoint
        from the measured corpus by construction: N_cal + N windows are drawn
        and every one the measured corpus also holds is dropped
        (:meth:`~poslens.model.corpus.Corpus.excluding`; two seeds' draws of a
        small source share windows often). The part is ``relativize.parquet``, one
        tidy result (:func:`~poslens.mechanisms.attribution.cumulative_attribution`),
        reused, refused or measured again (``overwrite``) like the other parts. A folder
        holding the part in its old layout of table format 1 (``attribution.json`` and
        three ``attribution*.parquet``) is refused naming both layouts, unless ``overwrite``
        asks to measure it again (the old files poslens wrote are removed once the new part is written in full, so a
        failure on the way keeps them).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Raises:
            InputError: When the calibration seed is the measured corpus's seed (the corpora would not be disjoint),
                or the corpus holds fewer windows than the two disjoint corpora need (N + N_cal).
            OldLayoutError: When the folder holds the part in its old layout (and not ``overwrite``).
            SettingsMismatchError: When the saved part was made with other settings (and not ``overwrite``).
            InputsChangedError: When the saved part's input files changed since (and not ``overwrite``).

        Example:
            >>> from poslens.mechanisms.attribution import attribution_figure  # doctest: +SKIP
            >>> attribution_figure(study.relativize(), "all")[["value", "ci_low", "ci_high"]]  # doctest: +SKIP
        """
        s = self.settings
        calibration_seed = s.seed + 1 if s.calibration_seed is None else s.calibration_seed
        if calibration_seed == s.seed:
            raise InputError(
                f"--calibration-seed {calibration_seed} is the measured corpus's --seed: the calibration corpus "
                f"must be disjoint from the measured one; pass another seed (default --seed + 1 = {s.seed + 1})"
            )
        replaces_old = self._old_attribution_layout()
        result = self._part("relativize", lambda: self._attribution(calibration_seed))
        if replaces_old and distributed.is_main():  # only once the new part is written in full
            from poslens.mechanisms.attribution_table import OLD_FILES

            remove_ours([self.out / name for name in OLD_FILES])
        return result

    def _old_attribution_layout(self) -> bool:
        """Refuse the relativize part's old layout in the folder; under ``overwrite``, True: its old files go once the new part is written."""
        from poslens.mechanisms.attribution_table import OLD_FILES, old_layout_message

        record = self.out / OLD_FILES[0]
        if distributed.decided_by_main(lambda: "old" if record.exists() else "none") == "none":
            return False
        if not self.overwrite:
            raise OldLayoutError(
                f"{old_layout_message(self.out)}. poslens does not reuse or replace the old files: pass --overwrite to "
                "measure the part again (removing the old files poslens wrote), or choose another --out; "
                "`poslens claims` still reads the old layout"
            )
        self.log(
            f"[relativize] {record} is the old layout of the part; measuring it again as relativize.parquet (--overwrite), "
            "and removing the old files once it is written"
        )
        return True

    def _attribution(self, calibration_seed: int) -> Result:
        """The cumulative attribution of :meth:`relativize`, computed (its corpora drawn, every mode measured)."""
        from poslens.mechanisms.attribution import cumulative_attribution

        s = self.settings
        model = self.model()
        measured = make_corpus(
            model, s.corpus, n_seqs=s.relativize_seqs, seq_len=s.relativize_len, position0=s.position0, seed=s.seed, text_field=s.text_field
        )
        # draw enough with the other seed to drop every window the measured corpus also holds: disjoint by construction
        n_calibration = s.calibration_seqs or s.relativize_seqs
        try:
            drawn = make_corpus(
                model,
                s.corpus,
                n_seqs=n_calibration + measured.n_seqs,
                seq_len=s.relativize_len,
                position0=s.position0,
                seed=calibration_seed,
                text_field=s.text_field,
            )
        except InputError as error:
            raise InputError(
                f"the calibration corpus must be disjoint from the measured one, so the corpus must hold "
                f"{measured.n_seqs} + {n_calibration} = {measured.n_seqs + n_calibration} windows of "
                f"{s.relativize_len} tokens (--n-seqs + --calibration-seqs); {error}"
            ) from error
        calibration = drawn.excluding(measured, n_calibration)
        return cumulative_attribution(
            model,
            measured,
            calibration,
            modes=s.relativize_modes,
            groups=s.groups,
            early=s.early,
            batch_size=s.batch_size,
            calibration_sizes=s.calibration_sizes or None,
            loss=s.relativize_loss,
            row_sums=s.row_sums,
            disk_budget=s.disk_budget,
            max_memory=s.max_memory,  # the loss passes keep every position's logits: planned against the memory
        )

    def claims(self, parts: dict[str, Result]) -> Claims:
        """Verdicts C1–C8 from whichever parts were run; writes ``claims.csv`` and ``claim_inputs.csv``.

        The parts must agree on every setting they share (:func:`poslens.study.part_cache.check_same_settings`,
        else :class:`poslens.study.part_cache.MixedSettingsError`): a claim never pairs figures of different runs.

        Args:
            parts: The study parts, by name.

        Returns:
            The claims (:class:`~poslens.study.claim_table.Claims`: the claims table and the inputs table).

        Raises:
            MixedSettingsError: When two parts disagree on a setting they share.

        Example:
            >>> table = study.claims({"leakage": study.leakage(), "path-tests": study.path_tests()})  # doctest: +SKIP
            >>> dict(zip(table.table["claim"], table.table["verdict"]))  # doctest: +SKIP
            {'C1': 'supported', 'C2': 'supported', 'C3': 'supported', 'C4': 'not measured', 'C5': 'not measured', 'C6': 'not measured'}
        """
        from poslens.mechanisms.comparisons import comparison_table
        from poslens.study.claim_table import CLAIMS_FILE, INPUTS_FILE
        from poslens.study.claims import evaluate

        check_same_settings(parts)
        comparison = parts.get("compare")
        # C4's paired table: the comparisons part, or in a compare part of table format 1 its meta
        compared = parts.get("comparisons", comparison)
        ablation = parts.get("ablate-sinks")
        if ablation is not None and ablation.table.empty:
            ablation = None  # no sink-reading head: C3's ablation was not measured
        split = parts.get("sink-split")
        if split is not None and not (split.table.get("kind", pd.Series(dtype=str)) == "derived").any():
            split = None  # no sink-reading head: nothing was split, so C8 was not measured
        table = evaluate(
            leakage=parts.get("leakage"),
            ablation=ablation,
            bos_swap=parts.get("bos-swap"),
            comparison=comparison,  # C4 reads the cases compare recorded in its meta
            fingerprint=parts.get("fingerprint"),
            attribution=parts.get("relativize"),  # C7, and C3's causal figure (reported)
            path=parts.get("path-tests"),  # C3, decided by the key-0 phase freeze (methodology §12)
            split=split,  # C8, the sink path's split (methodology §13)
            # C4 by paired/independent differences and trends (methodology §9.1) when compare recorded them
            c4_comparisons=comparison_table(compared) if compared is not None else None,
        )
        self.out.mkdir(parents=True, exist_ok=True)
        self.write(self.out / CLAIMS_FILE, lambda tmp: table.table.to_csv(tmp, index=False))
        self.write(self.out / INPUTS_FILE, lambda tmp: table.inputs.to_csv(tmp, index=False))
        return table

    def write(self, path: Path, write: Callable[[Path], None]) -> Path:
        """Write one file of the study (``claims.csv``, ``report.html``, ``run.json``): atomically, never over a file poslens did not write.

        ``write(tmp)`` fills a temporary file; the file is then listed in the
        folder's manifest (:mod:`poslens.ownership`) and in :attr:`written`.
        Under torchrun, rank 0 alone writes (the other ranks return ``path``).

        Args:
            path: The file to write.
            write: ``write(tmp)`` writes the content to ``tmp``.

        Returns:
            ``path``.

        Example:
            >>> import tempfile, pathlib
            >>> study = Study(Settings(), tempfile.mkdtemp())
            >>> path = study.write(study.out / "run.json", lambda tmp: tmp.write_text("{}"))
            >>> [p.name for p in study.written]
            ['run.json']
        """
        if not distributed.is_main():
            return path
        with replacing([path]):
            atomic_write(path, write)
            record_written([path])
        self.written.append(path)
        return path

    def with_settings(self, **changes: Any) -> Study:
        """A study in the same folder with some settings changed (a saved part made with other settings is refused, not replaced).

        Args:
            **changes: Settings to change.

        Returns:
            A new study with the changed settings, the same folder, log and ``overwrite``.

        Example:
            >>> study = Study(Settings.quick(), "results/quick")
            >>> longer = study.with_settings(seq_len=256)
            >>> longer.settings.seq_len, longer.out == study.out, study.settings.seq_len
            (256, True, 128)
        """
        return Study(replace(self.settings, **changes), self.out, self.log, self.overwrite)
