"""Shared set-up of the analysis scripts: settings from the command line, one output folder."""

from __future__ import annotations

import argparse

from poslens.study.parts import Settings, Study


def study_from_args(description: str) -> Study:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default="results/analyses", help="output folder (parts are reused across scripts)")
    parser.add_argument("--full", action="store_true", help="paper settings instead of the quick ones")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    settings = Settings.full(model=args.model) if args.full else Settings.quick(model=args.model)
    return Study(settings, args.out)


def show(claims) -> None:
    print(claims.table[["claim", "model", "figure", "ci_low", "ci_high", "verdict"]].to_string(index=False))
