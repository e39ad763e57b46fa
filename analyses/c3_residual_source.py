"""C3: the residual source runs through position 0 and sink-reading heads (C_res > 0 after layer 0; sink-path ablation lowers it)."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
leakage, ablation = study.leakage(), study.ablate_sinks()
plots.reductions(ablation.table).write_html(study.out / "c3_sink_ablation.html")
show(evaluate(leakage=leakage, ablation=ablation, claims=["C3"]))
