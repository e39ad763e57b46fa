"""C6: position 0 passes forward a fingerprint: constant across inputs with auto-BOS, varying otherwise."""

from _common import show, study_from_args

from poslens.measurement import plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
fingerprint = study.fingerprint()
plots.dispersion(fingerprint.table).write_html(study.out / "c6_dispersion.html")
show(evaluate(fingerprint=fingerprint, claims=["C6"]))
