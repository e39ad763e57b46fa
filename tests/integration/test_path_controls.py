"""The controls of the path-specific tests (methodology §12.5) on hand-built tiny models (``path_models.py``).

- **Sensitivity.** A head whose key-0 logit varies with i only through RoPE writes position into
  the residual stream entering layer 1 (probe R² clearly above the same model with the phase
  pair zeroed). Edit P0 removes it: the probe R² falls to within the zeroed model's interval;
  the key-1 sham leaves it as it was.
- **Specificity.** A raw, non-RoPE term c·log(i + 1) added to the key-0 logit writes position too.
  Edit P0 (which changes only the RoPE dot product) leaves that effect in place; edit M (the
  mask-only sink profile, built from the injected model's own unedited run) removes it.
- **Dose.** M's λ ∈ {0.25, 0.5, 1} moves the readout monotonically, and the table's dose-responses say so.

Each positive control injects its effect in its raw form: a RoPE phase, or a term added to the
logits, never a term already in the subspace an edit removes.
"""

from __future__ import annotations

import pytest
from path_models import SEQ_LEN, RawKeyZeroTerm, phase_model

import poslens
from poslens.fit.path_figures import run_figures
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
from poslens.mechanisms.path_tests import path_specific_tests, run_once

N_SEQS, GROUPS, EARLY, PENALTY = 32, 8, 16, 0.1


def probe_r2(model, corpus, interventions, layer: int = 1) -> tuple[float, float, float]:
    """(value, ci_low, ci_high) of the residual probe R² entering ``layer``."""
    frame = run_figures(*run_once(model, corpus, interventions, GROUPS, EARLY, batch_size=8), [], PENALTY).frame()
    row = frame[(frame["metric"] == "resid_probe_r2") & (frame["layer"] == layer)].iloc[0]
    return float(row["value"]), float(row["ci_low"]), float(row["ci_high"])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    phase = phase_model(tmp_path_factory.mktemp("phase"))
    flat = phase_model(tmp_path_factory.mktemp("flat"), zero_phase=True)
    corpus = poslens.make_corpus(phase, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, seed=0)
    return phase, flat, corpus


def test_sensitivity_p0_removes_position_written_through_the_rope_phase(models):
    phase, flat, corpus = models
    written = probe_r2(phase, corpus, [])
    zeroed = probe_r2(flat, corpus, [])
    assert written[1] > zeroed[2] + 0.05, (written, zeroed)  # the phase writes position: the control can fail
    frozen = probe_r2(phase, corpus, [KeyPhaseFreeze(8, layers=(0,))])
    assert zeroed[1] <= frozen[0] <= zeroed[2], (frozen, zeroed)  # within the zeroed model's interval
    everywhere = probe_r2(phase, corpus, [KeyPhaseFreeze(8)])
    assert zeroed[1] <= everywhere[0] <= zeroed[2]
    sham = probe_r2(phase, corpus, [KeyPhaseFreeze(8, key=1)])
    assert abs(sham[0] - written[0]) < 1e-9  # key 1 carries nothing on the phase pair: the sham changes nothing


def test_specificity_p0_keeps_a_raw_key0_term_and_m_removes_it(models):
    _, flat, corpus = models
    inject = RawKeyZeroTerm(layer=0, heads=(0,), c=-3.0)
    clean = probe_r2(flat, corpus, [])
    injected = probe_r2(flat, corpus, [inject])
    effect = injected[0] - clean[0]
    assert injected[1] > clean[2] + 0.05, (injected, clean)  # the raw term writes position
    with_p0 = probe_r2(flat, corpus, [inject, KeyPhaseFreeze(8)])
    assert abs((with_p0[0] - clean[0]) - effect) < 0.1 * effect, (with_p0, injected, clean)  # P0 leaves it
    baseline = poslens.measure(flat, corpus, groups=GROUPS, early=EARLY, batch_size=8, interventions=[inject], probe=False, progress=False)
    profile = MaskOnlySinkProfile.from_baseline(baseline, corpus, [(0, 0)], dose=1.0)
    with_m = probe_r2(flat, corpus, [inject, profile])
    assert with_m[0] - clean[0] < 0.2 * effect, (with_m, injected, clean)  # M removes (most of) it


def test_dose_of_m_is_monotone_and_the_table_says_so(models):
    _, flat, corpus = models
    inject = RawKeyZeroTerm(layer=0, heads=(0,), c=-3.0)
    result = path_specific_tests(
        flat,
        corpus,
        offsets=[1, 8, 32],
        doses=(0.25, 0.5, 1.0),
        groups=GROUPS,
        early=EARLY,
        batch_size=8,
        tau=0.15,  # head (0, 0) reads key 0 with a mean a_i0 of 0.19 under the injection; the others 0.06
        interventions=[inject],
        progress=False,
    )
    assert result.meta["sink_heads"] == [[0, 0]]
    doses = {(d["edit"], d["metric"]): d for d in result.meta["dose_responses"]}
    probe = doses[("sink-mask-only", "resid_probe_r2_ge2")]
    assert probe["doses"] == "0, 0.25, 0.5, 1"
    assert probe["direction"] == "falls" and probe["where_not"] == ""
    assert ("key0-phase", "resid_probe_r2_ge2") in doses  # the offsets' response is reported, whatever its direction
