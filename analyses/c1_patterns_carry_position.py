"""C1: attention patterns carry absolute position (binned ΔR² of log a and the probe R², per layer)."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
leakage = study.leakage()
plots.leakage_heatmap(leakage.table).write_html(study.out / "c1_leakage_heatmap.html")
print(leakage.summary("all", ("leakage_pattern", "leakage_pattern_heldout", "probe_r2")).to_string())
show(evaluate(leakage=leakage, claims=["C1"]))
