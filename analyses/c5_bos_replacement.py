"""C5: replacing the BOS embedding removes about 40% of C_res at early queries (per replacement kind)."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
swap = study.bos_swap()
plots.reductions(swap.table).write_html(study.out / "c5_bos_replacement.html")
show(evaluate(bos_swap=swap, claims=["C5"]))
