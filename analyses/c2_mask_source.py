"""C2: the mask source exists by construction (C_mask > 0 at layer 0 where C_res ≈ 0; count-term share)."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
leakage = study.leakage()
plots.sources_by_layer(leakage.table, "all").write_html(study.out / "c2_sources_by_layer.html")
print(leakage.summary("all", ("c_res", "c_mask", "count_share")).head(3).to_string())
show(evaluate(leakage=leakage, claims=["C2"]))
