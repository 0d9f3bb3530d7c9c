"""The optimiser of :mod:`autoplan.calibration.fit`: parameters inside their bounds through a
sigmoid map (log-scaled for FLOP counts), a Nelder–Mead simplex (Gao & Han 2012 adaptive
coefficients) and seeded multi-starts. Deterministic for a seed; no scipy needed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoplan.profiles import CalibratedParameters
from autoplan.profiles.efficiency import LOG_SCALED


def _to_unit(name: str, value: float, low: float, high: float) -> float:
    if name in LOG_SCALED:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def _from_unit(name: str, u: float, low: float, high: float) -> float:
    if name in LOG_SCALED:
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return low + u * (high - low)


@dataclass(frozen=True)
class Space:
    """z in R^n <-> parameter values inside their bounds (sigmoid map)."""

    names: tuple[str, ...]
    bounds: tuple[tuple[float, float], ...]

    @staticmethod
    def unit(z: np.ndarray) -> np.ndarray:
        """Positions in the boxes, 0..1."""
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))

    def values(self, z: np.ndarray) -> dict[str, float]:
        u = self.unit(z)
        return {n: _from_unit(n, float(ui), lo, hi) for n, ui, (lo, hi) in zip(self.names, u, self.bounds)}

    def point(self, params: CalibratedParameters) -> np.ndarray:
        u = [_to_unit(n, params.value(n), lo, hi) for n, (lo, hi) in zip(self.names, self.bounds)]
        u = np.clip(np.asarray(u, dtype=float), 0.02, 0.98)
        return np.log(u / (1.0 - u))


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, *, step: float = 1.0,
                max_evals: int = 400, ftol: float = 1e-9, xtol: float = 1e-4) -> tuple[np.ndarray, float, int]:
    """Minimise ``f`` from ``x0``: Nelder–Mead with Gao & Han (2012) adaptive coefficients
    (reflection 1, expansion 1 + 2/n, contraction 0.75 − 1/2n, shrink 1 − 1/n). Deterministic.
    Returns (best x, best f, evaluations)."""
    n = len(x0)
    alpha, gamma, rho, sigma = 1.0, 1.0 + 2.0 / n, 0.75 - 0.5 / n, 1.0 - 1.0 / n
    simplex = np.vstack([x0] + [x0 + step * np.eye(n)[i] for i in range(n)])
    values = np.array([f(x) for x in simplex])
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values, kind="stable")
        simplex, values = simplex[order], values[order]
        if values[-1] - values[0] <= ftol and np.max(np.abs(simplex[1:] - simplex[0])) <= xtol:
            break
        centroid = simplex[:-1].mean(axis=0)
        xr = centroid + alpha * (centroid - simplex[-1])
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + gamma * (xr - centroid)
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            outside = fr < values[-1]
            xc = centroid + rho * ((xr if outside else simplex[-1]) - centroid)
            fc = f(xc)
            evals += 1
            if fc < (fr if outside else values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:
                simplex[1:] = simplex[0] + sigma * (simplex[1:] - simplex[0])
                values[1:] = [f(x) for x in simplex[1:]]
                evals += n
    best = int(np.argmin(values))
    return simplex[best], float(values[best]), evals


def multistart(f: Callable[[np.ndarray], float], z0: np.ndarray, starts: int, seed: int,
                max_evals: int) -> tuple[np.ndarray, float, int]:
    """Nelder–Mead from ``z0`` and ``starts - 1`` seeded random points (N(0, 1.5) in the
    sigmoid space, i.e. spread over the whole box), then once more from the best."""
    rng = np.random.default_rng(seed)
    candidates = [z0] + [rng.normal(0.0, 1.5, size=len(z0)) for _ in range(max(0, starts - 1))]
    best_z, best_f, evals = z0, math.inf, 0
    for z in candidates:
        z, value, used = nelder_mead(f, z, max_evals=max_evals)
        evals += used
        if value < best_f:
            best_z, best_f = z, value
    best_z, best_f, used = nelder_mead(f, best_z, step=0.3, max_evals=max_evals)
    return best_z, best_f, evals + used
