"""GPU-hour prices: the shipped file, its schema, and the command-line overrides."""

from __future__ import annotations

import pytest

from autoplan.capacity.prices import (
    EVERY_GPU,
    PRICE_KINDS,
    load_prices,
    parse_price_overrides,
    parse_usd_per_gpu_hour,
    resolve_prices,
)
from autoplan.errors import AutoplanError, SpecError
from autoplan.specs.hardware import load_gpu


def test_shipped_prices_name_presets_and_carry_a_source_and_a_date():
    prices = load_prices()
    assert {"h100-sxm", "h200", "b200", "gb200-nvl72"} <= set(prices)
    for name, price in prices.items():
        assert load_gpu(name).name == name
        assert price.kind in PRICE_KINDS and price.source and price.provider
        assert len(price.date) == 10 and price.date[:2] == "20"
        assert 0 < price.usd_per_gpu_hour < 100


def test_deepseek_v3_assumed_h800_price_is_the_reports_two_dollars():
    # DeepSeek-V3 report Table 1: 2.788M GPU-hours = $5.576M, i.e. $2 per GPU-hour.
    assert load_prices()["h800"].usd_per_gpu_hour == pytest.approx(5.576e6 / 2.788e6)


@pytest.mark.parametrize("text, expected", [("2.69 USD per GPU-hour", 2.69), (" 4 USD per GPU-hour ", 4.0)])
def test_price_needs_its_unit(text, expected):
    assert parse_usd_per_gpu_hour(text, "f") == expected


@pytest.mark.parametrize("value", [2.69, "2.69", "2.69 USD", "2.69 USD per hour", "0 USD per GPU-hour",
                                   "5000 USD per GPU-hour"])
def test_price_without_unit_or_implausible_is_refused(value):
    with pytest.raises(SpecError, match="price"):
        parse_usd_per_gpu_hour(value, "prices.yaml: h100-sxm")


def test_price_file_refuses_unknown_keys_and_gpus(tmp_path):
    good = {"price": "2 USD per GPU-hour", "kind": "on-demand", "provider": "p", "source": "s", "date": "2026-01-01"}
    path = tmp_path / "prices.yaml"
    path.write_text("h100:\n" + "".join(f"  {k}: {v}\n" for k, v in {**good, "prise": 1}.items()))
    with pytest.raises(SpecError, match="prise"):
        load_prices(path)
    path.write_text("h100:\n" + "".join(f"  {k}: {v}\n" for k, v in good.items()))
    assert load_prices(path)["h100-sxm"].usd_per_gpu_hour == 2.0  # an alias is stored under the preset
    path.write_text("no-such-gpu:\n" + "".join(f"  {k}: {v}\n" for k, v in good.items()))
    with pytest.raises(AutoplanError, match="no-such-gpu"):
        load_prices(path)


def test_overrides_replace_defaults_and_a_bare_price_covers_every_gpu():
    defaults = load_prices()
    assert parse_price_overrides("h100=2.5, b200=4") == {"h100-sxm": 2.5, "b200": 4.0}
    prices = resolve_prices(["h100-sxm", "b200"], parse_price_overrides("b200=4"), defaults)
    assert prices["b200"].usd_per_gpu_hour == 4.0 and prices["b200"].kind == "command line"
    assert prices["h100-sxm"] == defaults["h100-sxm"]
    every = resolve_prices(["h100-sxm", "mi300x"], parse_price_overrides("3"), defaults)
    assert parse_price_overrides("3") == {EVERY_GPU: 3.0}
    assert {p.usd_per_gpu_hour for p in every.values()} == {3.0}


@pytest.mark.parametrize("text", ["h100-sxm=", "h100-sxm=cheap", "=2", "h100-sxm=-1"])
def test_bad_overrides_are_one_clear_error(text):
    with pytest.raises(AutoplanError, match="gpu-hour-price"):
        parse_price_overrides(text)


def test_gpu_without_price_names_the_option():
    with pytest.raises(AutoplanError, match=r"no GPU-hour price for mi300x .*--gpu-hour-price mi300x=USD"):
        resolve_prices(["mi300x"], {}, load_prices())
