"""Can a set of rows identify the parameters a fit is asked for?

From the sensitivity of the predictions to each parameter at the starting values (a finite
difference of log prediction over ``STEP`` of the parameter's box, on the rows that measure the
parameter's figure; :func:`autoplan.calibration.fit.sensitivities` computes it):

* a parameter that moves the prediction of fewer than ``MIN_ROWS`` rows by ``MIN_SENSITIVITY``
  or more is invisible to the rows (e.g. ``scale_out_efficiency`` on single-node runs): it is
  dropped from the fit, with a warning, instead of drifting to wherever the random starts put
  it (a parameter that acts on a few rows only, such as a pipeline term, still counts);
* two parameters whose sensitivity vectors are nearly parallel (|cosine| above
  ``MAX_COSINE``) move the predictions alike, so the rows cannot tell them apart: a warning;
  the fit's shrinkage toward the starting values picks among the equivalent solutions.

This is the local test of identifiability: parameters are locally identifiable where the
information matrix JᵀJ of the Jacobian J is non-singular (Rothenberg 1971, "Identification in
parametric models", Econometrica 39(3), Theorem 1); a (near) zero column or two (near) parallel
columns make it (near) singular.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

STEP = 0.1  # of the parameter's (sigmoid-mapped) box
MIN_SENSITIVITY = 0.002  # |Δ log prediction| (0.2%) that counts as seeing the parameter
MIN_ROWS = 3  # rows that must see a parameter to fit it
MAX_COSINE = 0.995


def screen(columns: Mapping[str, np.ndarray]) -> tuple[tuple[str, ...], list[str]]:
    """(parameters to fit, warnings) from each parameter's Δ log prediction over its rows.

    Parameters whose columns have the same length measure the same rows (the same figure) and
    are compared for collinearity.
    """
    kept, warnings = [], []
    for name, column in columns.items():
        seeing = int(np.sum(np.abs(column[np.isfinite(column)]) >= MIN_SENSITIVITY))
        if seeing < MIN_ROWS:
            warnings.append(f"{name} cannot be identified from these rows: moving it by {STEP:.0%} of its "
                            f"range changes {seeing} row(s)' prediction by {100 * MIN_SENSITIVITY:.1f}% or more "
                            f"(need {MIN_ROWS}); left at its starting value")
        else:
            kept.append(name)
    for i, a in enumerate(kept):
        for b in kept[i + 1:]:
            ca, cb = columns[a], columns[b]
            if len(ca) != len(cb):
                continue
            ok = np.isfinite(ca) & np.isfinite(cb)
            norm = float(np.linalg.norm(ca[ok]) * np.linalg.norm(cb[ok]))
            cosine = float(np.dot(ca[ok], cb[ok]) / norm) if norm > 0 else 0.0
            if abs(cosine) > MAX_COSINE:
                warnings.append(f"{a} and {b} move these rows' predictions alike (|cosine| {abs(cosine):.3f} "
                                f"> {MAX_COSINE}): the rows cannot tell them apart; the fit keeps them "
                                "near their starting values")
    return tuple(kept), warnings
