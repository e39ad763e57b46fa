"""The replicates' fits on threads give the figures they give in turn, to the bit.

:func:`poslens.runtime.threads.map_in_threads` returns results in the jobs' order and draws at
most ``threads`` jobs at a time; whatever the callers sum from the results is summed in the
order it was summed without threads, so the tables must not move at all.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from poslens.fit import replicates as replicates_module
from poslens.measurement.pipeline import measure_scores
from poslens.runtime import threads
from poslens.runtime.threads import map_in_threads


def _scores(n: int, heads: int, t: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    s = torch.randn(n, heads, t, t, generator=g) + 0.05 * (i - j) - 0.02 * j + 2.0 * (j == 0)
    return s.float().masked_fill(j > i, torch.finfo(torch.float32).min)


def test_results_come_back_in_order_while_jobs_overlap():
    running, most = [0], [0]
    lock = threading.Lock()

    def job(x: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)  # long enough for the other thread to start its job
        with lock:
            running[0] -= 1
        return -x

    assert list(map_in_threads(job, range(7), threads=3)) == [-x for x in range(7)]
    assert most[0] >= 2  # the jobs did overlap
    assert most[0] <= 3


def test_jobs_are_drawn_a_few_at_a_time():
    drawn = []

    def jobs():
        for k in range(10):
            drawn.append(k)
            yield k

    results = map_in_threads(lambda x: x, jobs(), threads=2)
    assert next(results) == 0
    assert len(drawn) == 2  # the first chunk only: a replicate's sums are built when a thread is free for them


def test_an_error_in_a_job_reaches_the_caller():
    def job(x: int) -> int:
        if x == 3:
            raise ValueError("job 3 failed")
        return x

    with pytest.raises(ValueError, match="job 3 failed"):
        list(map_in_threads(job, range(6), threads=2))


@pytest.mark.parametrize("route", ["store", "second-pass"])
def test_measurements_on_threads_equal_those_in_turn_to_the_bit(route, monkeypatch):
    layers = [_scores(8, 3, 20, seed) for seed in range(3)]
    on_threads = measure_scores(layers, groups=4, early=8, row_sums=route)
    # one thread: Replicates.of takes its jobs in turn, on the caller's thread
    monkeypatch.setattr(replicates_module, "map_in_threads", lambda function, jobs: map(function, jobs))
    in_turn = measure_scores(layers, groups=4, early=8, row_sums=route)
    assert threads.WORKER_THREADS >= 1
    for window in on_threads.sums.counterfactual_cells.replicates:
        np.testing.assert_array_equal(on_threads.sums.counterfactual_cells.replicates[window], in_turn.sums.counterfactual_cells.replicates[window])
    a, b = on_threads.table, in_turn.table
    assert len(a) == len(b) > 0
    for column in ("value", "ci_low", "ci_high"):
        np.testing.assert_array_equal(a[column].to_numpy(), b[column].to_numpy(), err_msg=column)
