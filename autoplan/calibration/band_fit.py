"""Build the error bands of :mod:`autoplan.calibration.uncertainty` from the measurements in
``validation/`` (``python benchmarks/accuracy.py --write-bands``; minutes, so never in tests).

Per group (trainer, GPU generation, dense/MoE), the band is the central ``COVERAGE`` of the
held-out log ratios ``r = log(measured / predicted)``: the ``QUANTILES`` of r, clipped so that
``low <= 1 <= high`` (an interval always contains its point).

* **Measured groups** (at least ``MIN_ROWS`` rows with the figure): every row is predicted by
  profiles that never saw a row of its source: leave-one-source-out (:mod:`autoplan.calibration.loso`:
  each pair of ``FIT_PLAN`` refitted on every other source, a pair left without rows transferred
  from the fold's other fits). A band is then the error a user's run from a source autoplan never
  saw meets (another trainer version, cluster or recipe), not the error inside a source (a split
  inside each source held 88% of the in-source rows and 65% of the LOSO predictions at b3234ab).
* **Unmeasured groups** (``measured: false``): a pair never measured runs on its profile's
  ``default`` parameters, so its band is the error of those defaults on measured rows, the
  trainer's own rows where it has at least ``MIN_ROWS``, else every row (each group weighted
  equally, so the 1,000-run sweep does not stand for every trainer), widened on each side
  by the spread across measured groups: half the range of the groups' median default-parameter
  log ratio (how much the bias moves from one generation or trainer to the next). The band is then
  widened to hold every measured band of the same trainer (``envelop_unmeasured``), so that a
  generation never measured (CDNA 4, an unknown GPU) is never narrower than a measured one.
* **By scale** (``tokens_per_s_by_scale``): a measured group's tokens/s band is also built per
  ``SCALE_CLASSES`` class of GPU counts that holds at least ``SCALE_MIN_ROWS`` of the group's
  held-out rows; a prediction for that many GPUs reads it. The playbook sweep's held-out errors
  widen with scale (stragglers and stalled runs across nodes), which one band per group hid.

The ``fingerprint`` in the file hashes its inputs (the measured row ids per source, the trainer
profiles' parsed values, not their comments or layout, ``FIT_PLAN``, the settings here); a test
compares it with the checkout, so new data or a refit profile without regenerated bands fails.
Changes to the cost model's code are not in the fingerprint: regenerate the bands after one.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from autoplan.calibration.accuracy import (
    FIT_PLAN,
    NOT_FITTED,
)
from autoplan.calibration.fit import (
    log_errors,
    predict_rows,
)
from autoplan.calibration.loso import Folds, fold_factory, fold_fits
from autoplan.calibration.rows import Row, Source, row_context
from autoplan.calibration.uncertainty import (
    BANDS_FILE,
    SCALE_CLASSES,
    UNKNOWN_GENERATION,
    generation_of,
    group_name,
    scale_class,
    trainer_family,
)
from autoplan.profiles import list_trainers, load_profile
from autoplan.profiles.profile import grouped_mapping
from autoplan.specs.hardware import list_gpus
from autoplan.specs.yaml_io import read_mapping

COVERAGE = 0.85
QUANTILES = ((1 - COVERAGE) / 2, (1 + COVERAGE) / 2)
MIN_ROWS = 5
SCALE_MIN_ROWS = 20  # held-out rows of a scale class for a band of its own
FIGURES = ("tokens_per_s", "peak_memory")
COMMAND = "python benchmarks/accuracy.py --write-bands"


def measured_rows(sources: Mapping[str, Source]) -> list[Row]:
    """Every row with a measured figure, except the sources that repeat another's rows."""
    return [r for name, s in sources.items() if name not in NOT_FITTED for r in s.rows
            if r.has_time or r.has_memory]


def row_group(row: Row) -> str:
    return group_name(row.trainer, generation_of(row.hardware), row.model.moe is not None)


def _ratios(pred: Mapping[str, np.ndarray], rows: Sequence[Row]) -> dict[str, np.ndarray]:
    """log(measured / predicted) per figure (NaN where not measured or not predicted)."""
    tokens = np.array([r.tokens_per_s_per_gpu for r in rows], dtype=float)
    memory = np.array([r.peak_memory_bytes for r in rows], dtype=float)
    return {"tokens_per_s": -log_errors(pred["tokens_per_s_per_gpu"], tokens),
            "peak_memory": -log_errors(pred["peak_memory_bytes"], memory)}


def loso_ratios(sources: Mapping[str, Source], rows: Sequence[Row], seed: int = 0,
                folds: Folds | None = None) -> tuple[list[Row], dict[str, np.ndarray]]:
    """(rows, their leave-one-source-out log ratios): every row predicted by the profiles fitted
    on every source but its own (:func:`fold_ratios`, concatenated over the sources)."""
    folds = fold_ratios(sources, seed, rows=rows, folds=folds)
    kept = [r for members, _ in folds.values() for r in members]
    parts = [ratios for _, ratios in folds.values()]
    return kept, {f: np.concatenate([p[f] for p in parts]) if parts else np.array([]) for f in FIGURES}


def default_ratios(rows: Sequence[Row]) -> dict[str, np.ndarray]:
    """Log ratios of every row predicted with its trainer's ``default`` (uncalibrated) parameters."""
    out = {f: np.full(len(rows), np.nan) for f in FIGURES}
    for trainer in sorted({r.trainer for r in rows}):
        index = [i for i, r in enumerate(rows) if r.trainer == trainer]
        members = [rows[i] for i in index]
        pred = predict_rows(members, row_context, load_profile(trainer).parameters["default"])
        for f, values in _ratios(pred, members).items():
            out[f][index] = values
    return out


def quantile_band(r: np.ndarray, widen: float = 0.0, weights: np.ndarray | None = None) -> list[float]:
    """[low, high] factors: the QUANTILES of the finite log ratios (each row weighted by
    ``weights``, default equal), widened by ``widen`` on each side, clipped to low <= 1 <= high.
    Weighted quantiles interpolate the midpoints of the sorted rows' cumulative weights."""
    w = np.ones_like(r) if weights is None else np.asarray(weights, dtype=float)
    ok = np.isfinite(r)
    order = np.argsort(r[ok])
    values, w = r[ok][order], w[ok][order]
    midpoints = (np.cumsum(w) - 0.5 * w) / np.sum(w)
    lo, hi = np.interp(QUANTILES, midpoints, values)
    return [round(float(np.exp(min(0.0, lo - widen))), 4), round(float(np.exp(max(0.0, hi + widen))), 4)]


def group_weights(groups: np.ndarray) -> np.ndarray:
    """1 / (rows of the row's group): every group counts once in a pool, however many rows it has."""
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse]


def _spread(groups: np.ndarray, r: np.ndarray, measured: set[str]) -> float:
    """Half the range of the measured groups' median log ratio (0 with fewer than two)."""
    medians = [float(np.median(r[(groups == g) & np.isfinite(r)])) for g in sorted(measured)]
    return 0.5 * (max(medians) - min(medians)) if len(medians) > 1 else 0.0


def build_groups(rows: Sequence[Row], heldout: Mapping[str, np.ndarray], default: Mapping[str, np.ndarray],
                 cv_rows: Sequence[Row]) -> dict[str, dict]:
    """Every (trainer, generation, dense/MoE) group's entry of the bands file."""
    generations = sorted({generation_of(g) for g in list_gpus()} | {UNKNOWN_GENERATION})
    cv_groups = np.array([row_group(r) for r in cv_rows])
    cv_classes = np.array([scale_class(r.layout["gpus"]) for r in cv_rows])
    all_groups = np.array([row_group(r) for r in rows])
    trainers = np.array([r.trainer for r in rows])
    counts = {f: {g: int(np.sum((cv_groups == g) & np.isfinite(heldout[f]))) for g in set(cv_groups)}
              for f in FIGURES}
    measured = {f: {g for g, n in counts[f].items() if n >= MIN_ROWS} for f in FIGURES}
    spread = {f: _spread(all_groups, default[f], measured[f]) for f in FIGURES}
    out = {}
    for trainer in list_trainers():
        for generation in generations:
            for moe in (False, True):
                name = group_name(trainer, generation, moe)
                entry: dict = {}
                for f, (flag, count) in zip(FIGURES, (("measured", "num_heldout_rows"),
                                                      ("memory_measured", "num_heldout_memory_rows"))):
                    n = counts[f].get(name, 0)
                    entry[flag], entry[count] = n >= MIN_ROWS, n
                    if n >= MIN_ROWS:
                        entry[f] = quantile_band(heldout[f][cv_groups == name])
                        if f == "tokens_per_s":
                            by_scale = scale_bands(heldout[f], cv_groups == name, cv_classes)
                            entry.update({"tokens_per_s_by_scale": by_scale} if by_scale else {})
                        continue
                    own = (trainers == trainer) & np.isfinite(default[f])
                    pool = own if own.sum() >= MIN_ROWS else np.isfinite(default[f])
                    entry[f] = quantile_band(default[f][pool], spread[f], group_weights(all_groups[pool]))
                out[name] = entry
    return envelop_unmeasured(out)


def envelop_unmeasured(groups: Mapping[str, dict]) -> dict[str, dict]:
    """Every unmeasured group's band widened to hold each measured band of its trainer's family
    (``uncertainty.trainer_family``) and kind (dense or MoE; its group and scale-class bands, per figure): such a pair runs on parameters
    transferred from those pairs (profiles.transfer), and a prediction for a generation the trainer was never
    measured on (MI355X's CDNA 4 today, or a GPU autoplan does not know) is never given a
    narrower band than one the trainer's measured runs earned on another generation."""
    flags = {"tokens_per_s": "measured", "peak_memory": "memory_measured"}
    out = {name: dict(entry) for name, entry in groups.items()}
    for f, flag in flags.items():
        for name, entry in out.items():
            if entry[flag]:
                continue
            trainer, _, kind = name.split("/")
            family = trainer_family(trainer)  # megatron-bridge: Megatron's groups bound its bands
            seen = [g for n, g in groups.items() if n.split("/")[0] in family and n.endswith(f"/{kind}") and g[flag]]
            bands = [g[f] for g in seen] + [s["tokens_per_s"] for g in seen if f == "tokens_per_s"
                                           for s in (g.get("tokens_per_s_by_scale") or {}).values()]
            entry[f] = [min([entry[f][0], *(b[0] for b in bands)]), max([entry[f][1], *(b[1] for b in bands)])]
    return out


def scale_bands(r: np.ndarray, in_group: np.ndarray, classes: np.ndarray) -> dict[str, dict]:
    """The group's (``in_group``) tokens/s band per scale class with at least SCALE_MIN_ROWS
    finite held-out log ratios ``r`` ({label: {num_heldout_rows, tokens_per_s}})."""
    out = {}
    for _, label in SCALE_CLASSES:
        rows = in_group & (classes == label) & np.isfinite(r)
        if rows.sum() >= SCALE_MIN_ROWS:
            out[label] = {"num_heldout_rows": int(rows.sum()), "tokens_per_s": quantile_band(r[rows])}
    return out


def _profile_content(path: Path) -> dict:
    """A profile file's values as the bands read them: parsed, its flat keys in their groups
    (``profile.grouped_mapping``), so that comments, key order and the file's form leave the
    fingerprint alone."""
    return grouped_mapping(read_mapping(path), str(path))


def fingerprint(sources: Mapping[str, Source]) -> str:
    """A hash of what the bands depend on, other than the cost model's code."""
    profiles = Path(load_profile.__code__.co_filename).parent  # the trainer profiles' folder
    parts = {"rows": {n: sorted(r.row_id for r in s.rows if r.has_time or r.has_memory) for n, s in sources.items()},
             "profiles": {p.name: _profile_content(p) for p in sorted(profiles.glob("*.yaml"))},
             "plan": {f"{t}/{h}": list(v) for (t, h), v in sorted(FIT_PLAN.items())},
             "settings": ["loso", QUANTILES, MIN_ROWS, SCALE_MIN_ROWS,
                          [[str(bound), label] for bound, label in SCALE_CLASSES]]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def bands_document(sources: Mapping[str, Source], seed: int = 0, folds: Folds | None = None) -> dict:
    """The whole bands file as a mapping (groups, inputs, fingerprint); ``folds``: the sources'
    fold fits where already made (``loso.all_fold_fits``)."""
    rows = measured_rows(sources)
    loso_rows, heldout = loso_ratios(sources, rows, seed, folds)
    groups = build_groups(rows, heldout, default_ratios(rows), loso_rows)
    return {"coverage": COVERAGE, "quantiles": [round(q, 4) for q in QUANTILES], "errors": "leave-one-source-out",
            "min_rows": MIN_ROWS,
            "scale_min_rows": SCALE_MIN_ROWS, "scale_classes": {label: str(bound) for bound, label in SCALE_CLASSES},
            "seed": seed,
            "fingerprint": fingerprint(sources),
            "inputs": {name: sum(r.has_time or r.has_memory for r in s.rows) for name, s in sources.items()},
            "groups": groups}


def write_bands(document: Mapping, path: Path = BANDS_FILE) -> None:
    """Write the bands file with a header saying how and when it was generated."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    doc = (__doc__ or "").split("\n\n", 1)[1].strip()
    header = [f"# Generated by `{COMMAND}` on {stamp}; do not edit by hand.",
              "# Factors multiply a point prediction: [point * low, point * high] for tokens/s per GPU",
              "# and peak memory (step time: the tokens/s band inverted). How they were built:", "#"]
    header += [f"# {line}".rstrip() for line in doc.splitlines()]
    text = "\n".join(header) + "\n" + yaml.safe_dump(dict(document), sort_keys=False, width=100)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def fold_ratios(sources: Mapping[str, Source], seed: int = 0, cache: dict | None = None,
                rows: Sequence[Row] | None = None, progress: Callable[[str], None] | None = None,
                folds: Folds | None = None) -> dict[str, tuple[list[Row], dict[str, np.ndarray]]]:
    """Per source: its ``rows`` (default: its measured rows) and their log ratios
    log(measured/predicted) per figure, predicted by the fold that left the source out
    (:mod:`autoplan.calibration.loso`; ``cache`` shares the fits between calls; ``folds``: the
    fits already made, by source, e.g. ``loso.stored_folds``)."""
    cache = {} if cache is None else cache
    wanted = {r.row_id for r in (measured_rows(sources) if rows is None else rows)}
    out = {}
    for name, source in sources.items():
        members = [r for r in source.rows if r.row_id in wanted]
        if not members:
            continue
        if progress:
            progress(name)
        fits = folds[name] if folds is not None else fold_fits(sources, name, seed, cache)
        pred = predict_rows(members, fold_factory(fits))
        out[name] = (members, _ratios(pred, members))
    return out


def nested_band_coverage(ratios: Mapping[str, tuple[list[Row], np.ndarray]]) -> dict[str, float]:
    """Per source (``ratios``: its rows and their tokens/s log ratios, :func:`fold_ratios`'), the share (%) of its time rows whose measurement lies in the band built, the way
    ``build_groups`` builds it, from the LOSO errors of every *other* source: the coverage a user's
    run from a new source sees (a band built with the source's own errors would be in-sample)."""
    every = [r for rows, _ in ratios.values() for r in rows]
    default = default_ratios(every)
    offsets = np.cumsum([0] + [len(rows) for rows, _ in ratios.values()])
    out = {}
    for k, (name, (rows, r)) in enumerate(ratios.items()):
        others = np.ones(len(every), dtype=bool)
        others[offsets[k]:offsets[k + 1]] = False
        other_rows = [row for row, keep in zip(every, others) if keep]
        heldout = {"tokens_per_s": np.concatenate([x for n, (_, x) in ratios.items() if n != name]),
                   "peak_memory": np.full(int(others.sum()), np.nan)}
        groups = build_groups(other_rows, heldout, {f: v[others] for f, v in default.items()}, other_rows)
        inside = []
        for row, ratio in zip(rows, r):
            if not np.isfinite(ratio):
                continue
            entry = groups[row_group(row)]
            scaled = entry.get("tokens_per_s_by_scale", {}).get(scale_class(row.layout["gpus"]))
            low, high = (scaled or entry)["tokens_per_s"]
            inside.append(math.log(low) <= ratio <= math.log(high))
        out[name] = 100.0 * float(np.mean(inside)) if inside else math.nan
    return out
