"""C7: later layers' absolute position depends on earlier layers' absolute logits (every layer relativized, methodology §11)."""

from _common import show, study_from_args

from poslens.measurement import intervention_plots
from poslens.study.claims import evaluate

study = study_from_args(__doc__)
attribution = study.relativize()
intervention_plots.plot_attribution(attribution.table).write_html(study.out / "c7_relativization.html")
intervention_plots.plot_loss_change(attribution.table).write_html(study.out / "c7_loss_change.html")
show(evaluate(attribution=attribution, claims=["C7"]))
