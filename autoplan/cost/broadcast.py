"""Evaluate a term once per distinct combination of the knobs it reads, then broadcast.

A search space is a cartesian product, so a term that reads a few knobs (the stage split reads
pp, vpp and pp_split) takes far fewer distinct values than there are layouts. ``per_group``
calls a formula on one representative layout per distinct combination of the knobs it reads
and copies each result to the layouts of its group: the same numbers as evaluating every
layout (each formula is element-wise over layouts), with a fraction of the arithmetic.

Which knobs a formula reads is recorded while it runs (``_Recorder``), not declared: a call
whose formula reads a knob outside its grouping is thrown away and the formula evaluated over
the whole batch, and the knob joins that formula's grouping from then on. Results stay exact
whatever a formula's author changes; only the speed depends on the knobs a formula reads.
What a grouped formula may not do: combine different layouts (a sum or a mean over the batch);
a batch-wide max, any or all is fine, since every distinct value of the knobs read is in the
subset. ``tests/unit/cost/test_broadcast.py`` compares grouped and per-layout evaluation bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from autoplan.layout import FIELDS, LayoutBatch

# Batches smaller than this, or groupings with more than this share of distinct rows, are
# evaluated directly: grouping them costs more than it saves.
MIN_ROWS = 256
MAX_GROUP_SHARE = 0.5
# The largest mixed-radix key range turned into groups with a lookup table (no sort).
MAX_TABLE_KEYS = 1 << 22
# Attributes of a LayoutBatch computed from fields: what reading them means.
DERIVED_READS = {"gbs_seqs": ("dp", "mbs", "grad_acc")}


@dataclasses.dataclass(frozen=True)
class Grouping:
    """Rows of a batch grouped by the values of some knobs: ``first`` (one row per group) and
    ``inverse`` (the group of every row)."""

    first: np.ndarray
    inverse: np.ndarray

    def spread(self, value: Any, inverse: np.ndarray | None = None) -> Any:
        """``value`` computed over ``first`` (arrays whose last axis is the groups; tuples,
        lists, dicts and dataclasses of them) copied to every row of each group, or to the rows
        whose groups are ``inverse`` (a part of ``self.inverse``)."""
        inverse = self.inverse if inverse is None else inverse
        if isinstance(value, np.ndarray):
            if value.ndim == 1 and len(value) == len(self.first):
                return value[inverse]
            if value.ndim > 1 and value.shape[-1] == len(self.first):
                return np.take(value, inverse, axis=-1)  # (faster than value[..., inverse])
            return value
        if isinstance(value, dict):
            return {k: self.spread(v, inverse) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(self.spread(v, inverse) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.replace(value, **{f.name: self.spread(getattr(value, f.name), inverse)
                                                 for f in dataclasses.fields(value) if f.init})
        return value


# Per thread, inside ``shared_groupings``: batch id -> (the batch, its column codes and groupings).
_LOCAL = threading.local()


@contextlib.contextmanager
def shared_groupings():
    """Share knob codes and groupings of a batch between the formulas evaluated in this block
    (``cost.evaluate``); outside it every call groups afresh (a batch may change between calls)."""
    scopes = _LOCAL.__dict__.setdefault("scopes", [])
    scopes.append({})
    try:
        yield
    finally:
        scopes.pop()


def _cache(batch: LayoutBatch) -> dict:
    scopes = _LOCAL.__dict__.get("scopes")
    if not scopes:
        return {}
    entry = scopes[-1].get(id(batch))
    if entry is None:  # the batch kept: its id stays its own
        entry = scopes[-1][id(batch)] = (batch, {})
    return entry[1]


def _column_codes(batch: LayoutBatch, name: str) -> tuple[np.ndarray | None, int]:
    """Dense codes 0..k−1 of the distinct values of one knob column, and k (codes None where
    the column holds one value)."""
    cache = _cache(batch)
    if name not in cache:
        values = getattr(batch, name)
        low, high = float(values.min()), float(values.max())
        ints = values.astype(np.intp) if 0 <= low < high < MAX_TABLE_KEYS else None
        if low == high:
            cache[name] = (None, 1)
        elif ints is not None and (ints == values).all():
            present = np.zeros(int(high) + 1, dtype=bool)
            present[ints] = True
            lookup = (np.cumsum(present) - 1).astype(np.int32)
            cache[name] = (lookup[ints], int(lookup[-1]) + 1)
        else:  # not small non-negative integers: sort them
            distinct, inverse = np.unique(values, return_inverse=True)
            cache[name] = (inverse.reshape(-1).astype(np.int32), len(distinct))
    return cache[name]


def group_rows(batch: LayoutBatch, names: tuple[str, ...]) -> Grouping:
    """Group the rows of ``batch`` by the values of the knobs ``names`` (mixed-radix keys over
    each knob's dense codes, a lookup table where the key range is small, else a sort)."""
    cache = _cache(batch)
    if names in cache:
        return cache[names]
    # Knobs with one value in the batch are no part of the key: groupings that differ only in
    # them (or in order) are one grouping.
    varying = tuple(sorted(name for name in names if _column_codes(batch, name)[0] is not None))
    if ("varying", varying) in cache:
        cache[names] = cache[("varying", varying)]
        return cache[names]
    cache[names] = cache[("varying", varying)] = _grouping(batch, varying)
    return cache[names]


def _grouping(batch: LayoutBatch, names: tuple[str, ...]) -> Grouping:
    """``group_rows`` of knobs that each take several values in ``batch``: the mixed-radix key
    starts from the groups of the largest subset of them grouped already (int32 keys: the key
    range stays below MAX_TABLE_KEYS · the largest knob's count)."""
    cache, key, size = _cache(batch), None, 1
    subsets = [k[1] for k in cache if isinstance(k, tuple) and k[:1] == ("varying",) and set(k[1]) < set(names)]
    if subsets:
        done = max(subsets, key=len)
        group = cache[("varying", done)]
        key, size = group.inverse.astype(np.int32), len(group.first)
        names = tuple(name for name in names if name not in done)
    for name in names:
        codes, count = _column_codes(batch, name)
        if key is None:
            key, size = codes, count
            continue
        if size * count > MAX_TABLE_KEYS:  # compress the key so far: a sort
            _, key = np.unique(key, return_inverse=True)
            key, size = key.reshape(-1), int(key.max(initial=0)) + 1
        key = key * count + codes
        size *= count
    if key is None:  # every row alike
        return Grouping(first=np.zeros(min(len(batch), 1), dtype=np.intp), inverse=np.zeros(len(batch), dtype=np.intp))
    key = key.astype(np.intp)  # (numpy indexes with intp: an int32 index is converted on every use)
    present = np.zeros(size, dtype=bool)
    present[key] = True
    distinct = np.flatnonzero(present)
    lookup = np.empty(size, dtype=np.intp)
    lookup[distinct] = np.arange(len(distinct))
    inverse = lookup[key]
    first = np.empty(len(distinct), dtype=np.intp)
    first[inverse] = np.arange(len(batch))
    return Grouping(first=first, inverse=inverse)


def on_distinct(batch: Any, names: tuple[str, ...], fn: Callable[..., Any], key: Any = None) -> Any:
    """``fn(*columns)`` of the knob columns ``names``, evaluated on one row per distinct
    combination of them and copied to every row (``fn`` element-wise over its columns; a
    batch-wide max is fine). ``key`` (hashable, naming ``fn``) keeps the distinct results inside
    ``shared_groupings`` for the other calls on the same batch and on the probes a grouped
    formula (``per_group``) takes of it, which take their rows of them: one evaluation of ``fn``
    per batch."""
    columns = [getattr(batch, name) for name in names]  # (read through a probe: recorded)
    source, rows = _probed(batch)
    if len(source) < MIN_ROWS:
        if key is None or rows is not None:
            return fn(*columns)
        # a small batch is not grouped, but its result is kept for the other calls on it (the
        # stage split is read by some 16 formulas of one evaluate: most of a small batch's cost)
        cache = _cache(source)
        if (key, names, "whole") not in cache:
            cache[(key, names, "whole")] = fn(*columns)
        return cache[(key, names, "whole")]
    cache = _cache(source)
    entry = cache.get((key, names)) if key is not None else None
    if entry is None:
        group = group_rows(source, names)
        entry = (group, fn(*(getattr(source, name)[group.first] for name in names)))
        if key is not None:
            cache[(key, names)] = entry
    group, value = entry
    return group.spread(value, None if rows is None else group.inverse[rows])


def _probed(batch: Any) -> tuple[LayoutBatch, np.ndarray | None]:
    """The batch a grouped formula's probe (``per_group``) took its rows from, and those rows;
    (``batch``, None) for a batch that is no probe."""
    inner = batch._batch if isinstance(batch, _Recorder) else batch
    if isinstance(inner, _RowsOf):
        return inner._source, inner._index
    return inner, None


class _RowsOf(LayoutBatch):
    """``batch.take(index)`` that takes each knob column only when a formula first reads it
    (a grouped formula reads a few of the batch's columns). Inside ``shared_groupings`` the
    columns taken are shared by every probe of the same rows (a grouping's ``first``)."""

    def __init__(self, batch: LayoutBatch, index: np.ndarray):  # (no LayoutBatch.__init__: nothing taken yet)
        self._source, self._index = batch, index

    def __getattr__(self, name: str) -> Any:  # called only for a column not taken yet
        if name not in FIELDS:
            raise AttributeError(name)
        # (the entry keeps the index array alive, so its id names it for the scope)
        taken = _cache(self._source).setdefault(("rows", id(self._index)), (self._index, {}))[1]
        value = taken.get(name)
        if value is None:
            value = taken[name] = getattr(self._source, name)[self._index]
        setattr(self, name, value)
        return value


class _Recorder:
    """A stand-in for a ``LayoutBatch`` that records which attributes a formula reads."""

    def __init__(self, batch: LayoutBatch):
        self._batch = batch
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.update(DERIVED_READS.get(name, (name,) if name in FIELDS else FIELDS))
        return getattr(self._batch, name)

    def __len__(self) -> int:
        return len(self._batch)


def _hashable(options: tuple) -> bool:
    try:
        hash(options)
    except TypeError:
        return False
    return True


def per_group(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a formula ``fn(ctx, batch, *options)`` whose result over layouts depends only on
    the knobs it reads from ``batch`` (element-wise; ``options`` are not arrays over layouts):
    it then runs once per distinct combination of those knobs (see the module docstring).
    Inside ``shared_groupings`` it runs once per batch, context and options, whatever the batch's
    size (its callers only read the result). Called from inside another grouped formula (on its
    probe), it runs once per batch inside ``shared_groupings`` and the probe takes its rows of the
    result (``nested``)."""
    reads: dict[tuple, tuple[str, ...]] = {}

    def grouped(ctx: Any, batch: LayoutBatch, options: tuple) -> tuple[Grouping, Any] | None:
        """(grouping, result per group) where the known reads group the batch small enough."""
        known = reads.get(options)
        if known is None:
            return None
        group = group_rows(batch, known)
        if len(group.first) > MAX_GROUP_SHARE * len(batch):
            return None
        probe = _Recorder(_RowsOf(batch, group.first))
        result = fn(ctx, probe, *options)
        return (group, result) if probe.read <= set(known) else None

    def record(ctx: Any, batch: Any, options: tuple) -> Any:
        """``fn`` on every row of ``batch``, learning the knobs it reads."""
        probe = _Recorder(batch)
        result = fn(ctx, probe, *options)
        reads[options] = tuple(sorted(probe.read | set(reads.get(options, ()))))
        return result

    def nested(ctx: Any, probe: _Recorder, options: tuple) -> Any:
        """``fn`` on the rows of another grouped formula's probe: its grouped result on the
        probe's source batch (once per batch inside ``shared_groupings``), those rows taken; the
        knobs ``fn`` reads are read through the probe, so the caller's grouping includes them."""
        source, rows = _probed(probe)
        known = reads.get(options)
        if rows is None or known is None or len(source) < MIN_ROWS:
            return record(ctx, probe, options)
        cache = _cache(source)
        key = (nested, id(ctx), options)  # (the entry keeps ctx: its id is not reused in the scope)
        if key not in cache:
            cache[key] = (ctx, grouped(ctx, source, options))
        entry = cache[key][1]
        if entry is None:  # not groupable: on the probe's rows
            return record(ctx, probe, options)
        for name in known:
            getattr(probe, name)
        group, result = entry
        return group.spread(result, group.inverse[rows])

    def whole(ctx: Any, batch: LayoutBatch, options: tuple) -> Any:
        """``fn`` on every row of ``batch``: grouped where the batch groups small enough."""
        if len(batch) < MIN_ROWS:
            return fn(ctx, batch, *options)
        entry = grouped(ctx, batch, options)
        if entry is not None:
            group, result = entry
            return group.spread(result)
        return record(ctx, batch, options)

    @functools.wraps(fn)
    def wrapper(ctx: Any, batch: Any, *options: Any) -> Any:
        if options and not _hashable(options):
            return fn(ctx, batch, *options)
        # Once per batch, context and options inside ``shared_groupings``: the stage split and
        # the layer activations are read by several formulas of one evaluate, each of which ran
        # them again on a batch below MIN_ROWS. A plain batch below MIN_ROWS (a one-layout
        # evaluate) goes straight to ``fn``, as ``whole`` would send it, under ``whole``'s key.
        if type(batch) is LayoutBatch and batch.tp.shape[0] < MIN_ROWS:
            return _kept(batch, whole, ctx, options, fn, ctx, batch, *options)
        if isinstance(batch, _Recorder):
            return nested(ctx, batch, options)
        if not isinstance(batch, LayoutBatch):
            return fn(ctx, batch, *options)
        return _kept(batch, whole, ctx, options, whole, ctx, batch, options)

    return wrapper


def once_per_batch(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a helper ``fn(ctx, batch, *options)`` that several formulas of one evaluate ask
    of the same batch: inside ``shared_groupings`` it runs once per batch, context and options
    (``options`` hashable, not arrays). On a grouped formula's probe it runs on every call, so
    that the probe records what it reads."""

    @functools.wraps(fn)
    def wrapper(ctx: Any, batch: Any, *options: Any) -> Any:
        if not isinstance(batch, LayoutBatch):
            return fn(ctx, batch, *options)
        return _kept(batch, wrapper, ctx, options, fn, ctx, batch, *options)

    return wrapper


def _kept(batch: LayoutBatch, key: Callable[..., Any], ctx: Any, options: tuple,
          compute: Callable[..., Any], *args: Any) -> Any:
    """``compute(*args)`` once per batch and (``key``, context, options) inside
    ``shared_groupings``; outside it on every call. The context stands in the key by its id, and
    the entry keeps it, so that the id is not reused within the scope. (The arguments are passed,
    not closed over: a closure per call costs a one-layout evaluate() more than the lookup.)"""
    cache, name = _cache(batch), (key, id(ctx), options)
    entry = cache.get(name)
    if entry is None:
        entry = cache[name] = (ctx, compute(*args))
    return entry[1]
