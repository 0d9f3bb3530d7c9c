"""Exhaustive studies stored without chunk claims: by an autoplan before claims, or claims deleted.

A resumed exhaustive study skips the chunks it holds claims for
(:func:`autoplan.search.exhaustive.store_layouts`); a study holding trials but no claims must
instead be told which layouts it holds, so that none is stored twice. That read is bounded:
only the knob values of its COMPLETE trials, kept as one flat index of the product (int64) per
trial, read from Optuna's RDB tables (``optuna/storages/_rdb/models.py``) in pages of
``PAGE_TRIALS`` trials; for other storages (a journal file, which Optuna's ``JournalStorage``
replays into memory whole when it opens) from the trials it holds already, uncopied. Never the
trials whole: ~60 KiB each with their attributes, 56,880 of them took > 236 s and 3.09 GiB
(issue 48).

While such a study is claimed chunk by chunk it carries the mark ``LEGACY_ATTR``, so a run
killed halfway, or another process on the study, still reads what it holds instead of storing
the unclaimed chunks again; once every chunk of the space is claimed the mark is cleared
(:func:`settle`), and later resumes read claims only.
"""

from __future__ import annotations

import numpy as np

from autoplan.space import KNOBS, SearchSpace

# Study system attribute: True while the study holds trials that no chunk claim accounts for.
LEGACY_ATTR = "autoplan:unclaimed-trials"
PAGE_TRIALS = 2048  # trials per read: ~25 K parameter rows


def held_layouts(store, space: SearchSpace) -> np.ndarray:
    """The flat indices (sorted) of the layouts of ``space`` that the study of ``store`` holds
    without a claim; empty for a study with claims (or none stored). Read once per process."""
    if store.unclaimed is None:
        store.unclaimed = _read(store.study, space)
    return store.unclaimed


def _read(study, space: SearchSpace) -> np.ndarray:
    from autoplan.search.storage import CLAIM_PREFIX, num_trials

    attrs = study._storage.get_study_system_attrs(study._study_id)
    marked = attrs.get(LEGACY_ATTR) is True
    if not marked and (any(k.startswith(CLAIM_PREFIX) for k in attrs) or not num_trials(study)):
        return np.zeros(0, dtype=np.int64)
    if not marked:  # before the first claim: whoever sees a claim sees the mark
        study._storage.set_study_system_attr(study._study_id, LEGACY_ATTR, True)
    return stored_flat_indices(study, space)


def settle(study) -> None:
    """Clear the mark: every chunk of the space is claimed, so later resumes read claims only."""
    study._storage.set_study_system_attr(study._study_id, LEGACY_ATTR, False)


def stored_flat_indices(study, space: SearchSpace) -> np.ndarray:
    """The flat indices in the product of ``space`` of the study's COMPLETE trials (those
    whose knob values are all in the space), sorted and unique."""
    from autoplan.search.storage import _rdb

    rdb = _rdb(study)
    pages = _rdb_pages(rdb, study._study_id, space) if rdb is not None else _trial_pages(study, space)
    axes = [page[(page >= 0).all(axis=1)] for page in pages]
    if not axes:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.ravel_multi_index(np.concatenate(axes).T, space.shape).astype(np.int64))


def _rdb_pages(rdb, study_id: int, space: SearchSpace):
    """Per page of trials: their axis indices (one row per trial, KNOBS order; -1 where a knob
    is missing or its value is not in the space), from the trials and trial_params tables. Each
    knob's distribution is read once when the study has one per knob (as autoplan stores it)."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    trials, params = models.TrialModel.__table__, models.TrialParamModel.__table__
    column = {k: j for j, k in enumerate(KNOBS)}
    with _create_scoped_session(rdb.scoped_session) as session:
        kinds = session.execute(sa.select(params.c.param_name, params.c.distribution_json).distinct().where(
            params.c.trial_id.in_(sa.select(trials.c.trial_id).where(trials.c.study_id == study_id)))).all()
    lookups = {(name, text): _choice_axes(text, name, space) for name, text in kinds if name in column}
    if len({name for name, _ in lookups}) < len(lookups):  # a knob with two distributions
        yield from _rdb_pages_mixed(rdb, study_id, lookups)
        return
    width = max((len(v) for v in lookups.values()), default=0) + 1
    table = np.full((len(KNOBS), width), -1, dtype=np.int64)  # [knob, choice] -> axis; last: -1
    for (name, _), lookup in lookups.items():
        table[column[name], :len(lookup)] = lookup
    # A knob of one value whose stored choices are that value is at axis 0 in every trial: not read.
    fixed = [name for (name, _), lookup in lookups.items() if len(space.values[name]) == 1 and (lookup == 0).all()]
    code = {name: column[name] for name, _ in lookups if name not in fixed}
    for ids, rows in _trial_param_rows(rdb, study_id, [params.c.trial_id, params.c.param_name,
                                                       params.c.param_value], names=list(code)):
        trial_id, names, values = zip(*rows) if rows else ((), (), ())
        knob = np.array([code.get(n, -1) for n in names], dtype=np.int64)
        i = np.searchsorted(ids, trial_id)
        keep = (knob >= 0) & (i < len(ids)) & (ids[np.minimum(i, len(ids) - 1)] == trial_id)
        choice = np.asarray(values, dtype=np.float64)[keep].astype(np.int64)
        choice = np.where((choice >= 0) & (choice < width), choice, width - 1)
        page = np.full((len(ids), len(KNOBS)), -1, dtype=np.int64)
        page[:, [column[name] for name in fixed]] = 0
        page[i[keep], knob[keep]] = table[knob[keep], choice]
        yield page


def _trial_param_rows(rdb, study_id: int, wanted: list, names: list[str] | None = None):
    """Per page of the study's COMPLETE trials: (their ids, sorted, as an array; the ``wanted``
    columns of their trial_params rows, of the parameters ``names`` or all)."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    from optuna.trial import TrialState

    trials, params = models.TrialModel.__table__, models.TrialParamModel.__table__
    last = -1
    while True:
        with _create_scoped_session(rdb.scoped_session) as session:
            ids = session.execute(sa.select(trials.c.trial_id).where(
                trials.c.study_id == study_id, trials.c.state == TrialState.COMPLETE,
                trials.c.trial_id > last).order_by(trials.c.trial_id).limit(PAGE_TRIALS)).scalars().all()
            if not ids:
                return
            rows = session.execute(sa.select(*wanted).where(
                params.c.trial_id >= ids[0], params.c.trial_id <= ids[-1],
                params.c.param_name.in_(names) if names is not None else sa.true())).all()
        last = ids[-1]
        yield np.asarray(ids, dtype=np.int64), rows


def _rdb_pages_mixed(rdb, study_id: int, lookups: dict):
    """:func:`_rdb_pages` for a study with several distributions of one knob: each row's own."""
    from optuna.storages._rdb import models

    params = models.TrialParamModel.__table__
    column = {k: j for j, k in enumerate(KNOBS)}
    for ids, rows in _trial_param_rows(rdb, study_id, [params.c.trial_id, params.c.param_name,
                                                       params.c.param_value, params.c.distribution_json]):
        row_of = {int(trial_id): i for i, trial_id in enumerate(ids)}
        page = np.full((len(ids), len(KNOBS)), -1, dtype=np.int64)
        for trial_id, name, value, text in rows:
            i, lookup = row_of.get(trial_id), lookups.get((name, text))
            if i is not None and lookup is not None and 0 <= value < len(lookup):
                page[i, column[name]] = lookup[int(value)]
        yield page


def _choice_axes(dist_json: str, knob: str, space: SearchSpace) -> np.ndarray:
    """For a stored categorical distribution of ``knob``: each choice's index in the space's
    values of the knob (-1 when the space lacks it, or for another distribution)."""
    from optuna.distributions import CategoricalDistribution, json_to_distribution

    dist = json_to_distribution(dist_json)
    if not isinstance(dist, CategoricalDistribution):
        return np.zeros(0, dtype=np.int64)
    axis = {v: i for i, v in enumerate(space.values[knob])}
    return np.array([axis.get(c, -1) for c in dist.choices], dtype=np.int64)


def _trial_pages(study, space: SearchSpace):
    """:func:`_rdb_pages` for other storages, from the trials they hold (uncopied)."""
    import optuna

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    axis = {k: {v: i for i, v in enumerate(space.values[k])} for k in KNOBS}
    for start in range(0, len(trials), PAGE_TRIALS):
        yield np.array([[axis[k].get(t.params.get(k), -1) for k in KNOBS]
                        for t in trials[start:start + PAGE_TRIALS]], dtype=np.int64).reshape(-1, len(KNOBS))
