"""plans.csv written from the arrays is byte for byte what pandas' to_csv writes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoplan.api import build_context, build_training
from autoplan.report.csv_text import csv_text
from autoplan.search import SearchOptions, search
from autoplan.space import load_space


def pandas_csv(columns) -> str:
    return pd.DataFrame(columns).to_csv(index=False, float_format="%.9g", lineterminator="\n")


def test_awkward_cells_match_pandas():
    columns = {"int": np.array([1, -2, 0], dtype=np.int64),
               "float": np.array([1.5, np.nan, 1e-12]), "inf": np.array([np.inf, -np.inf, 123456789.123]),
               "bool": np.array([True, False, True]),
               "text": np.array(["", "core_attn,mlp", 'say "hi"\nthere'], dtype=object)}
    assert csv_text(columns) == pandas_csv(columns)


@pytest.mark.slow  # a few seconds; `pytest -m slow`
def test_a_search_writes_what_pandas_would():
    ctx = build_context("mixtral-8x7b", build_training(64, 4096, 512))
    space = load_space("moe").with_overrides(recompute_modules=("", "core_attn,mlp"), pp=(1, 2, 4))
    result = search(ctx, space, SearchOptions(sampler="exhaustive"))
    columns = result.columns_of(result.kept_rows())
    assert csv_text(columns) == pandas_csv(columns)
    assert list(result.to_frame().columns) == list(columns)


def test_repeated_values_are_formatted_as_each_cell_alone():
    # Over 64 rows each distinct value is formatted once and gathered: -0.0 and 0.0 differ in
    # their bits (pandas writes '-0' and '0'), NaN is an empty cell, text cells are quoted alone.
    rng = np.random.default_rng(0)
    pool = np.array([0.0, -0.0, np.nan, np.inf, 1 / 3, 2.5e9, -7.0])
    columns = {"float": pool[rng.integers(0, len(pool), 500)],
               "int": rng.integers(-3, 3, 500),
               "bool": rng.integers(0, 2, 500).astype(bool),
               "text": np.array(["a", "b,c", 'd"e', ""], dtype=object)[rng.integers(0, 4, 500)],
               "unique": rng.normal(size=500)}
    assert csv_text(columns) == pandas_csv(columns)
