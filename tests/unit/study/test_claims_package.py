"""The claims are one subpackage: a claim is one module, evaluate gives it the inputs it declares and no other, and the
modules' old paths still import."""

from __future__ import annotations

import importlib
import sys
import warnings

import pandas as pd
import pytest

import poslens.study.claims as claims
from poslens.study import MOVED
from poslens.study.claims import CLAIMS, declared_claims, evaluate
from poslens.study.claims.lookup import figure_row

# A claim module as a contributor writes it: one Claim in DECLARES, nothing else edited.
C9_MODULE = """
from poslens.study.claims.lookup import pick
from poslens.study.claims.rules import ZERO, Condition, Rule, verdict
from poslens.study.claims.table import Claim, claim_row, keyed, with_roles

RULE = Rule((Condition("token_mean", "ci_low", ">", ZERO),), (Condition("token_mean", "ci_high", "<=", ZERO),))
SEEN = []


def decide(token_mean, leakage=None, c9_floor=0.0):
    SEEN.append(dict(token_mean=token_mean, leakage=leakage, c9_floor=c9_floor))
    f = pick(token_mean, "token_mean", metric="token_mean", layer=-1, head=-1, query_window="all")
    outcome = verdict(RULE, (f,))
    return keyed([claim_row(C9, "m", f, RULE.text(), outcome, with_roles(RULE, (f,), "token_mean"))])


C9 = Claim("C9", "the tokens have a positive mean", ("token_mean",), ("token-mean",), (RULE,), "token_mean",
           reads=("leakage",), settings=("c9_floor",), decide=decide)
DECLARES = (C9,)
"""


@pytest.fixture
def c9(tmp_path, monkeypatch):
    """C9 declared in a module of its own, found on the package's path as a module of it would be."""
    (tmp_path / "c9_token_mean.py").write_text(C9_MODULE)
    monkeypatch.setattr(claims, "__path__", [*claims.__path__, str(tmp_path)])
    found = declared_claims()
    monkeypatch.setattr(claims, "CLAIMS", found)
    yield sys.modules["poslens.study.claims.c9_token_mean"]
    sys.modules.pop("poslens.study.claims.c9_token_mean", None)


def _token_mean(value: float) -> pd.DataFrame:
    return pd.DataFrame([figure_row("token_mean", value, value - 0.1, value + 0.1)])


def test_a_claim_module_is_found_and_decided_with_the_inputs_it_declares(c9):
    assert list(claims.CLAIMS)[-1] == "C9" and "C9" not in CLAIMS  # found by its module alone
    bos_swap = pd.DataFrame([figure_row("reduction", 0.4, 0.35, 0.45, intervention="bos:mean", query_window="early")])
    leakage = pd.DataFrame([figure_row("c_res", 0.1, 0.05, 0.15)])
    out = evaluate(token_mean=_token_mean(0.5), leakage=leakage, bos_swap=bos_swap, c9_floor=0.2, claims=["C9"])
    assert out.table["verdict"].tolist() == ["supported"]
    (seen,) = c9.SEEN
    assert set(seen) == {"token_mean", "leakage", "c9_floor"} and seen["leakage"] is leakage and seen["c9_floor"] == 0.2
    assert evaluate(token_mean=_token_mean(-0.5), claims=["C9"]).table["verdict"].tolist() == ["not supported"]
    assert c9.SEEN[-1]["leakage"] is None  # a read input not given is left out, not passed as None
    assert evaluate(leakage=leakage, claims=["C9"]).table["verdict"].tolist() == ["not measured"]


def test_evaluate_refuses_an_input_no_claim_reads():
    with pytest.raises(TypeError, match="token_mean"):
        evaluate(token_mean=_token_mean(0.5))
    with pytest.raises(TypeError, match="both by position and by name"):
        evaluate(_token_mean(0.5), leakage=_token_mean(0.5))


def test_each_claim_lives_in_its_own_module():
    modules = {claim.name: claim.decide.__module__ for claim in CLAIMS.values()}
    assert len(set(modules.values())) == len(CLAIMS), modules
    for name, module in modules.items():
        assert module.startswith(f"poslens.study.claims.c{name[1:]}_"), (name, module)


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_module_path_imports_the_moved_module(old, new):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new  # the moved module keeps its own spec
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_the_old_modules_of_two_claims_still_hold_both():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from poslens.study.claims_leakage import C2
        from poslens.study.claims_position0 import C6
    assert (C2.name, C6.name) == ("C2", "C6")
