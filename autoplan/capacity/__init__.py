"""Capacity planning: which GPUs, how many, for how long and at what cost.

``run_capacity(setup, query)`` searches GPU types and rented GPU counts (:mod:`.grid`), runs the
layout search for each batch phase of the run (:mod:`.points`, :mod:`.schedule`), prices the
GPU-hours (:mod:`.prices`, ``hardware_db/prices.yaml``) and returns the Pareto front of
wall-clock days vs cost with the chosen point (:mod:`.front`); :mod:`.files` writes
capacity.csv and a plans.json for ``autoplan export``.
"""

from autoplan.capacity.points import CapacitySetup
from autoplan.capacity.query import CapacityQuery
from autoplan.capacity.run import CapacityResult, run_capacity

__all__ = ["CapacityQuery", "CapacityResult", "CapacitySetup", "run_capacity"]
