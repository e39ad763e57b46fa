"""The kinds of test in this suite, and the browser guard: which marker each test file's tests get, and when a missing browser skips.

Every test gets exactly one kind marker, assigned in ``conftest.py`` from its file:

- ``unit``: the default; fast tests on synthetic data and tiny random models (``make test-fast`` runs these alone);
- ``integration``: end to end, slow: every test that uses an embedded 4-bit model (these keep the ``embedded``
  marker as well), the whole-command files of :data:`FILE_KINDS` (the wheel build, torchrun, the zoo's training)
  and the slowest tests of the other files (:data:`SLOW_TESTS`);
- ``notebooks``: the tutorial notebooks and notebooks run in a real Jupyter kernel;
- ``docs``: the docs site build, the API pages, the docstrings and their examples, the maths and the § references;
- ``browser``: the report opened in headless Chromium.

Select with ``pytest -m unit``, ``-m "not integration"``, ``-m docs`` and so on.

A test that needs a browser calls :func:`require_browser`: it skips with the reason where no chromium or
chromedriver is installed, and fails instead when ``POSLENS_REQUIRE_BROWSER=1`` (``make test`` sets it, so a
machine that has the browser cannot pass the suite by skipping the browser test).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

KINDS = ("unit", "integration", "notebooks", "docs", "browser")
DEFAULT_KIND = "unit"
# The kind of every test file that is not unit. A unit test that uses an embedded model becomes integration (conftest.py).
FILE_KINDS = {
    # whole commands, the compatibility matrix (64 tiny kinds built and run) and the dense references on tiny
    # models: slow (together 83% of the unit time measured with --durations on 2 cores)
    "test_wheel_install.py": "integration",
    "test_distributed.py": "integration",
    "test_path_distributed.py": "integration",
    "test_zoo.py": "integration",
    "test_compatibility.py": "integration",
    "test_cli_relativize.py": "integration",
    "test_comparisons.py": "integration",
    "test_capture_dispatch.py": "integration",
    "test_fuzz.py": "integration",
    "test_leakage_reference.py": "integration",
    "test_decomposition_reference.py": "integration",
    "test_path_reference.py": "integration",
    "test_path_controls.py": "integration",
    # notebooks
    "test_notebooks.py": "notebooks",
    "test_notebook_display.py": "notebooks",
    # the docs site, the API reference and the docstrings
    "test_docs.py": "docs",
    "test_api_docs.py": "docs",
    "test_docstrings.py": "docs",
    "test_docstring_examples.py": "docs",
    "test_math_rendering.py": "docs",
    "test_section_refs.py": "docs",
    # a real browser
    "test_report_browser.py": "browser",
}
# Single slow tests of otherwise unit files, as "file::function" (every parametrization): integration, so that
# make test-fast stays under 2 minutes (measured with --durations on this machine's 2 cores).
SLOW_TESTS: dict[str, str] = {
    key: "integration"
    for key in (
        "test_reliability.py::test_ctrl_c_during_report_then_rerun_resumes",
        "test_leakage_controls.py::test_tables_do_not_depend_on_batching_or_order_within_groups",
        "test_counterfactual_routes.py::test_budget_below_the_store_takes_the_second_pass_with_the_same_figures",
        "test_decomposition_controls.py::test_noise_floor_meanfield_is_biased_and_per_sequence_is_far_smaller",
        "test_relativization_controls.py::test_relative_stack_is_unchanged_within_its_interval",
        "test_relativization_reference.py::test_fit_matches_reference",
        "test_relativization_reference.py::test_edited_figures_match_reference",
        "test_forward_pass.py::test_calibration_in_several_batches_is_the_one_batch_fit_and_the_reference",
        "test_sinks_effects_reference.py::test_reduction_matches_hand_computation",
        "test_glossary.py::test_every_emitted_metric_has_one_entry_and_every_entry_is_emitted",
        "test_glossary.py::test_the_check_fails_on_a_missing_or_a_stale_entry",
        "test_integrity.py::test_a_second_run_into_a_locked_folder_is_refused_at_once_naming_the_holder",
        "test_integrity.py::test_an_attribution_that_cannot_be_read_is_refused_and_kept_unless_overwrite",
        "test_reliability.py::test_sigterm_and_ctrl_c_print_one_line_and_leave_no_lock_note_and_no_folder",
        "test_path_readouts.py::test_the_path_table_saves_reloads_and_plots",
        "test_key_phase.py::test_identity_reproduces_the_unedited_tables",
        "test_in_memory.py::test_the_users_model_is_as_given_after_every_command",
        "test_batches_span_groups.py::test_measure_with_batches_across_groups_equals_batches_within_groups",
    )
}
REQUIRE_BROWSER = "POSLENS_REQUIRE_BROWSER"


def kind_of(path: str | Path, embedded: bool, function: str = "") -> str:
    """The kind marker of a test in the file ``path``.

    Args:
        path: the test file (only its name is read).
        embedded: whether the test uses an embedded model (has the ``embedded`` marker).
        function: the test function's name (without its parameters), looked up in :data:`SLOW_TESTS`.

    Returns:
        One of :data:`KINDS`: the file's kind from :data:`FILE_KINDS`, else ``integration`` for an embedded test or
        one of :data:`SLOW_TESTS`, else ``unit``.

    Example:
        >>> kind_of("tests/test_sums.py", embedded=False), kind_of("tests/test_sums.py", embedded=True)
        ('unit', 'integration')
        >>> kind_of("tests/test_docs.py", embedded=False)
        'docs'
    """
    name = Path(path).name
    kind = FILE_KINDS.get(name, SLOW_TESTS.get(f"{name}::{function}", DEFAULT_KIND))
    return "integration" if kind == DEFAULT_KIND and embedded else kind


def require_browser(environ: Mapping[str, str] = os.environ, which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """The paths of chromium and chromedriver; skip the calling test where either (or selenium) is missing.

    Args:
        environ: the environment to read :data:`REQUIRE_BROWSER` from.
        which: finds a program on the PATH (:func:`shutil.which`; a test passes a stub).

    Returns:
        ``(chromium, chromedriver)``, the two paths.

    Raises:
        pytest.skip.Exception: something the browser test needs is missing, and ``POSLENS_REQUIRE_BROWSER`` is not ``1``.
        pytest.fail.Exception: something is missing and ``POSLENS_REQUIRE_BROWSER=1`` (``make test``).

    Example:
        >>> require_browser(which=lambda name: f"/usr/bin/{name}")
        ('/usr/bin/chromium', '/usr/bin/chromedriver')
    """
    found = {name: which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in found.items() if not path]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium")
    if missing:
        reason = (
            f"{' and '.join(missing)} not installed: the browser test needs Debian's chromium and chromium-driver "
            "and the selenium package (make setup installs them)"
        )
        if environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(f"{REQUIRE_BROWSER}=1 (make test) but {reason}", pytrace=False)
        pytest.skip(reason)
    return found["chromium"], found["chromedriver"]
