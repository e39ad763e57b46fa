"""CellSums keeps its statistics as named arrays, and the counterfactual cells beside them: reductions, addition, saving and loading."""

from __future__ import annotations

import numpy as np
import pytest

from poslens.fit.binning import Binning
from poslens.fit.counterfactual_cells import CounterfactualCells
from poslens.fit.sums import QUERY_WINDOWS, CellSums, SumFields, array_shapes
from poslens.fit.sums_files import load_sums, save_sums
from poslens.fit.sums_sizes import sums_bytes


def filled(groups: int = 3, seed: int = 0) -> CellSums:
    """Sums whose every array holds distinct random values."""
    rng = np.random.default_rng(seed)
    sums = CellSums.zeros(groups=groups, layers=2, heads=3, binning=Binning(24, early=8), layer_windows=(None, 8))
    for array in [*sums.per_group.as_dict().values(), *sums.counterfactual_cells.saved_arrays().values()]:
        array[...] = rng.normal(size=array.shape)
    sums.group_sizes[:] = 1.0
    return sums


def test_every_field_has_the_shape_of_the_table():
    sums = filled()
    shapes = array_shapes(3, 2, 3, sums.binning)
    assert list(shapes) == list(SumFields.names())
    assert {name: a.shape for name, a in sums.per_group.as_dict().items()} == shapes
    assert not any(name.startswith("counterfactual") for name in shapes)  # fitted values live beside the sums
    held = [
        *sums.per_group.as_dict().values(),
        *sums.counterfactual_cells.saved_arrays().values(),
        sums.row_features,
        sums.row_count,
        sums.group_sizes,
    ]
    assert sums_bytes(3, 2, 3, sums.binning) == sum(a.nbytes for a in held)


def test_reductions_drop_the_group_axis():
    sums = filled()
    g = sums.per_group
    pooled, left, one, rest = sums.pooled(), sums.leave_out(1), sums.group(2), sums.leave_out_groups({0, 2})
    for reduced in (pooled, left, one, rest):
        assert isinstance(reduced, SumFields)
    np.testing.assert_array_equal(pooled.logit, g.logit.sum(axis=0))
    np.testing.assert_array_equal(left.logit, g.logit.sum(axis=0) - g.logit[1])
    np.testing.assert_array_equal(one.probe_gram, g.probe_gram[2])
    np.testing.assert_array_equal(rest.key0_logit_by_row, g.key0_logit_by_row[1])
    assert pooled.sequence_count.shape == () and float(pooled.sequence_count) == pytest.approx(g.sequence_count.sum())


def test_counterfactual_cells_pool_by_group_and_take_replicates_whole():
    cells = filled().counterfactual_cells
    assert isinstance(cells, CounterfactualCells) and sorted(cells.per_group) == sorted(QUERY_WINDOWS)
    # a replicate's counterfactual is refitted without its group: taken whole, not the sum over the other groups
    np.testing.assert_array_equal(cells.leave_out(1)["all"], cells.replicates["all"][1])
    np.testing.assert_array_equal(cells.leave_out(1)["early"], cells.replicates["early"][1])
    np.testing.assert_array_equal(cells.pooled()["all"], cells.per_group["all"].sum(axis=0))
    for g, replicate in enumerate(cells.leave_out_each()):
        for w in QUERY_WINDOWS:
            np.testing.assert_array_equal(replicate[w], cells.replicates[w][g])


def test_leave_out_each_gives_every_leave_out_to_the_bit():
    sums = filled(groups=4)
    g_arrays = sums.per_group
    replicates = list(sums.leave_out_each())
    assert len(replicates) == 4
    for g, replicate in enumerate(replicates):
        got = replicate.as_dict()
        assert got.keys() == sums.leave_out(g).as_dict().keys()
        for name, array in got.items():
            want = getattr(g_arrays, name).sum(axis=0) - getattr(g_arrays, name)[g]
            np.testing.assert_array_equal(array, want, err_msg=f"group {g}: {name}")


def test_window_accessors_name_the_choices():
    sums = filled()
    assert sums.per_group.logit_by_offset("early") is sums.per_group.logit_by_offset_early
    with pytest.raises(ValueError, match="early, all"):
        sums.per_group.logit_by_offset("late")


def test_addition_adds_every_field():
    a, b = filled(seed=1), filled(seed=2)
    total = a + b
    for name, array in total.per_group.as_dict().items():
        np.testing.assert_array_equal(array, getattr(a.per_group, name) + getattr(b.per_group, name), err_msg=name)
    for name, array in total.counterfactual_cells.saved_arrays().items():
        want = a.counterfactual_cells.saved_arrays()[name] + b.counterfactual_cells.saved_arrays()[name]
        np.testing.assert_array_equal(array, want, err_msg=name)
    np.testing.assert_array_equal(total.group_sizes, 2.0 * np.ones(3))
    with pytest.raises(ValueError, match="different shapes"):
        a + filled(groups=4)


def test_save_and_load_keep_every_field(tmp_path):
    sums = filled()
    save_sums(sums, tmp_path / "sums.npz")
    back = load_sums(tmp_path / "sums.npz")
    assert back.binning == sums.binning and back.layer_windows == sums.layer_windows
    for name, array in sums.per_group.as_dict().items():
        np.testing.assert_array_equal(getattr(back.per_group, name), array, err_msg=name)
    for name, array in sums.counterfactual_cells.saved_arrays().items():
        np.testing.assert_array_equal(back.counterfactual_cells.saved_arrays()[name], array, err_msg=name)


def test_sums_saved_with_the_cells_among_them_still_load(tmp_path):
    """Files written while the counterfactual cells were sums fields (a_counterfactual_*) read into the cells."""
    sums = filled()
    cells = sums.counterfactual_cells
    old = {
        f"a_counterfactual_{w}{tail}": (cells.per_group if not tail else cells.replicates)[w] for w in QUERY_WINDOWS for tail in ("", "_replicate")
    }
    np.savez(
        tmp_path / "old.npz",
        seq_len=sums.binning.seq_len,
        early=sums.binning.early,
        row_features=sums.row_features,
        row_count=sums.row_count,
        group_sizes=sums.group_sizes,
        layer_windows=np.array([-1, 8]),
        tag=np.array(""),
        **{f"a_{name}": array for name, array in sums.per_group.as_dict().items()},
        **old,
    )
    back = load_sums(tmp_path / "old.npz")
    for name, array in cells.saved_arrays().items():
        np.testing.assert_array_equal(back.counterfactual_cells.saved_arrays()[name], array, err_msg=name)
    np.testing.assert_array_equal(back.per_group.logit, sums.per_group.logit)


def test_sums_of_an_older_poslens_are_refused(tmp_path):
    # the keys version 2 wrote before the arrays had names
    old = {"a_n": np.zeros((2, 1, 8, 8)), "a_s1": np.zeros((2, 1, 1, 8, 8)), "a_nseq": np.zeros(2)}
    np.savez(tmp_path / "old.npz", seq_len=8, early=8, row_features=np.zeros((1, 1, 4, 8)), row_count=np.zeros(8), group_sizes=np.zeros(2), **old)
    with pytest.raises(ValueError, match="written by an older poslens.*measure again"):
        load_sums(tmp_path / "old.npz")


def test_sums_of_a_newer_format_are_refused_naming_both_versions(tmp_path):
    from poslens.version import SUMS_FORMAT, __version__

    save_sums(filled(), tmp_path / "sums.npz")
    with np.load(tmp_path / "sums.npz") as data:
        arrays = {name: data[name] for name in data.files}
    assert int(arrays["sums_format"]) == SUMS_FORMAT and str(arrays["poslens_version"]) == __version__
    arrays.update(sums_format=np.array(SUMS_FORMAT + 1), poslens_version=np.array("9.9.9"))
    np.savez(tmp_path / "newer.npz", **arrays)
    with pytest.raises(ValueError, match=rf"sums format {SUMS_FORMAT + 1} \(written by poslens 9\.9\.9\).*this poslens {__version__}"):
        load_sums(tmp_path / "newer.npz")
