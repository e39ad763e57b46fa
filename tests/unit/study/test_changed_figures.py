"""benchmarks/changed_figures.py: which claims' inputs moved between two run folders, and which verdicts changed."""

from __future__ import annotations

import pandas as pd
from scripts import load_script


def _folder(path, inputs, verdicts):
    path.mkdir()
    columns = ["key", "claim", "name", "role", "value", "ci_low", "ci_high", "model", "variant", "intervention"]
    pd.DataFrame(inputs, columns=columns).to_csv(path / "claim_inputs.csv", index=False)
    pd.DataFrame(verdicts, columns=["claim", "model", "verdict"]).to_csv(path / "claims.csv", index=False)
    return path


def test_moved_inputs_unpaired_inputs_and_changed_verdicts(tmp_path):
    script = load_script("benchmarks/changed_figures.py")
    same = ["C1.1", "C1", "probe_r2", "decides", 0.75, 0.73, 0.77, "m", "base", "none"]
    before = _folder(
        tmp_path / "before",
        [same, ["C3.1", "C3", "reduction", "reported", 0.45, 0.32, 0.58, "m", "base", "sink-ablation"]],
        [["C1", "m", "supported"], ["C3", "m", "supported"]],
    )
    after = _folder(
        tmp_path / "after",
        [
            same,
            ["C3.1", "C3", "reduction", "reported", 0.37, 0.25, 0.49, "m", "base", "sink-ablation"],
            ["C8.1", "C8", "r1", "headline", 0.98, 0.97, 0.99, "m", "base", "split"],
        ],
        [["C1", "m", "supported"], ["C3", "m", "supported"], ["C8", "m", "supported"]],
    )
    moved, unpaired = script.changed_inputs(before, after)
    assert moved[["claim", "name"]].values.tolist() == [["C3", "reduction"]]
    assert moved["change"].iloc[0] == 0.37 - 0.45
    assert unpaired[["claim", "name", "in"]].values.tolist() == [["C8", "r1", "after"]]
    verdicts = script.changed_verdicts(before, after)
    assert verdicts.values.tolist() == [["C8", "m", "", "supported"]]
    nudged = _folder(tmp_path / "nudged", [same[:4] + [0.75 + 1e-12, 0.73, 0.77] + same[7:]], [["C1", "m", "supported"]])
    moved, unpaired = script.changed_inputs(_folder(tmp_path / "base", [same], [["C1", "m", "supported"]]), nudged)
    assert moved.empty and unpaired.empty  # within the tolerance, and nothing unpaired
