"""docs/zoo.md's tables come from the committed weights: re-measuring runs of docs/zoo_family gives docs/zoo_data's figures.

Each run is measured here as ``poslens zoo-measure`` measures it (the options ``measure.json`` records, the
family's held-out text, the leakage part), from the float16 folder in the repository, and compared with its rows
of ``figures.csv``. A retrained or re-stored family, or a change to the measurement, fails it until the tables are
written again (``poslens zoo-measure --zoo docs/zoo_family --out docs/zoo_data …``, then ``docs/make_zoo.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from poslens.study.parts import Study
from poslens.study.settings import ZooMeasureOptions
from poslens.study.zoo_measure import choose_parts
from poslens.zoo.store import verify_family

ROOT = Path(__file__).resolve().parents[2]
FAMILY = ROOT / "docs" / "zoo_family"
DATA = ROOT / "docs" / "zoo_data"
KEYS = ["metric", "layer", "query_window", "intervention"]


@pytest.mark.parametrize("run", ["sliding-s1", "standard-s0"])
def test_the_committed_weights_give_the_pages_leakage_figures(run: str, tmp_path: Path) -> None:
    verify_family(FAMILY)  # the weights are the ones hashes.json records
    measured = json.loads((DATA / "measure.json").read_text())
    recorded = measured["options"]
    options = ZooMeasureOptions(
        **{key: value for key, value in recorded.items() if key not in ("replacements", "seq_len")},
        replacements=tuple(recorded["replacements"]),
    )
    seq_len = int(recorded["seq_len"])
    study = Study(options.settings(str(FAMILY / run), str((FAMILY / "held_out.jsonl").resolve()), seq_len), tmp_path / run, log=lambda line: None)
    (leakage,) = choose_parts("leakage")
    got = leakage.figures(study)
    member, seed = run.rsplit("-s", 1)
    table = pd.read_csv(DATA / "figures.csv")
    want = table[(table["member"] == member) & (table["seed"] == int(seed)) & (table["part"] == "leakage")]
    assert len(want) > 10 and len(got) == len(want)
    both = want.merge(got, on=KEYS, suffixes=("_page", "_now"), validate="one_to_one")
    assert len(both) == len(want)
    for column in ("value", "ci_low", "ci_high"):
        # the CSV keeps 6 significant digits
        np.testing.assert_allclose(both[f"{column}_now"], both[f"{column}_page"], rtol=2e-5, atol=1e-9, err_msg=f"{run}: {column}")
