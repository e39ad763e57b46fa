"""C4: NTK suppresses the residual source, sliding windows let it accumulate, standard RoPE sits in between."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
comparison = study.compare()
plots.sources_by_layer(comparison.table, "all").write_html(study.out / "c4_architectures.html")
show(evaluate(comparison=comparison, claims=["C4"], c4_query_window="all"))  # C4 reads the cases compare recorded
