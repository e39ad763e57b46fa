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

from poslens.errors import InputError
from poslens.files import atomic_write
from poslens.measurement.pipeline import measure
from poslens.measurement.result import Result
from poslens.model.corpus import Corpus, make_corpus
from poslens.model.loading import load_model
from poslens.model.pos_model import PosModel
from poslens.model.reads import recording_reads
from poslens.ownership import record_written, replacing
from poslens.runtime import distributed
from poslens.study.inputs import corpus_inputs, model_inputs
from poslens.study.part_cache import (
    cached_part,
    check_same_settings,
)
from poslens.study.part_registry import PARTS
from poslens.study.settings import Settings

if TYPE_CHECKING:
    from poslens.study.claims.table import Claims


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

    def cached(self, name: str, compute: Callable[[], Result], inputs: dict[str, str] | None = None) -> Result:
        """Part ``name`` reused from the folder when its settings (declared in :data:`PARTS`) and inputs match, else computed and saved.

        What a part's declaration calls to make its table (:attr:`poslens.study.part_registry.Part.compute`).

        Args:
            name: The part's name.
            compute: Makes the part's table.
            inputs: The hashes of its input files (default: :meth:`inputs`).

        Returns:
            The part.

        Example:
            >>> study.cached(name, lambda: Result(table, {}))  # doctest: +SKIP
        """
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

    def part(self, name: str) -> Result:
        """The part ``name``, made by its declaration (:attr:`poslens.study.part_registry.Part.compute`).

        ``study.<name with _ for ->()`` is the same: every declared part is a method of the study
        (``study.leakage()``, ``study.sink_split()``).

        Args:
            name: The part's name (its command).

        Returns:
            The part's tidy result, reused from the folder when it matches.

        Raises:
            InputError: When the part declares no compute function.

        Example:
            >>> study.part(name).summary("early")  # doctest: +SKIP
        """
        compute = PARTS[name].compute
        if compute is None:
            raise InputError(f"part {name!r} declares no compute function")
        return compute(self)

    def __getattr__(self, attribute: str) -> Callable[[], Result]:
        """``study.sink_split`` for a part registered after this module loaded (a test's or a plugin's)."""
        name = attribute.replace("_", "-")
        if attribute.startswith("_") or name not in PARTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attribute!r}")
        return lambda: self.part(name)

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

    def measured(self, interventions=(), probe: bool = True) -> Result:
        """The study's corpus measured on its model with ``interventions`` (:func:`poslens.measure`, the settings' options).

        Args:
            interventions: The interventions of the measurement.
            probe: Whether the position probe is fitted.

        Returns:
            The measurement (not saved: a part saves it through :meth:`cached`).

        Example:
            >>> study.measured().value("c_res", "early")  # doctest: +SKIP
        """
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

    def claims(self, parts: dict[str, Result]) -> Claims:
        """Verdicts C1–C8 from whichever parts were run; writes ``claims.csv`` and ``claim_inputs.csv``.

        The parts must agree on every setting they share (:func:`poslens.study.part_cache.check_same_settings`,
        else :class:`poslens.study.part_cache.MixedSettingsError`): a claim never pairs figures of different runs.

        Args:
            parts: The study parts, by name.

        Returns:
            The claims (:class:`~poslens.study.claims.table.Claims`: the claims table and the inputs table).

        Raises:
            MixedSettingsError: When two parts disagree on a setting they share.

        Example:
            >>> table = study.claims({name: study.part(name) for name in names})  # doctest: +SKIP
            >>> dict(zip(table.table["claim"], table.table["verdict"]))  # doctest: +SKIP
            {'C1': 'supported', 'C2': 'supported', 'C3': 'supported', 'C4': 'not measured', 'C5': 'not measured', 'C6': 'not measured'}
        """
        from poslens.study.claims import evaluate
        from poslens.study.claims.table import CLAIMS_FILE, INPUTS_FILE
        from poslens.study.part_registry import claim_inputs

        check_same_settings(parts)
        table = evaluate(**claim_inputs(parts))  # each part gives the inputs it declares (Part.provides)
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


def _method(name: str) -> Callable[[Study], Result]:
    def method(self: Study) -> Result:
        return self.part(name)

    compute = PARTS[name].compute
    method.__name__ = method.__qualname__ = PARTS[name].method
    method.__doc__ = compute.__doc__ if compute is not None else PARTS[name].summary
    return method


for _name, _declared in PARTS.items():  # study.leakage(), study.sink_split(), …: one method per declared part
    setattr(Study, _declared.method, _method(_name))
