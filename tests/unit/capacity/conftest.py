"""A small capacity run shared by the capacity tests: llama3-8b on H100 and H200, 64..1024 GPUs."""

from __future__ import annotations

import pytest

from autoplan.capacity import CapacityQuery, CapacitySetup, run_capacity
from autoplan.capacity.prices import load_prices, resolve_prices
from autoplan.capacity.schedule import parse_gbs_schedule
from autoplan.space import load_space
from autoplan.specs.hardware import load_gpu
from autoplan.specs.models import load_model

SMALL_HARDWARE = ("h100-sxm", "h200")


def small_query(gpu_types=SMALL_HARDWARE, overrides=None, **limits) -> CapacityQuery:
    gpus = tuple(load_gpu(g) for g in gpu_types)
    prices = resolve_prices([g.name for g in gpus], overrides or {}, load_prices())
    return CapacityQuery(gpu_types=gpus, gpus_low=64, gpus_high=1024,
                         phases=parse_gbs_schedule("1M:50B,2M", 1e12), prices=prices, **limits)


def small_setup() -> CapacitySetup:
    return CapacitySetup(model=load_model("8b"), space=load_space("default"))


@pytest.fixture(scope="session")
def small_run():
    return run_capacity(small_setup(), small_query())
