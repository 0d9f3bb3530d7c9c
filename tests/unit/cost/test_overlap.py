"""The share of a once-per-step data-parallel collective that compute hides (cost/overlap.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoplan.cost.overlap import chunked_exposed_s

seconds = st.floats(0.0, 10.0)


def test_one_chunk_hides_behind_the_window_alone():
    comm, window = np.array([1.0, 3.0, 0.0]), np.array([2.0, 2.0, 2.0])
    for overlap in (1.0, 0.7):
        np.testing.assert_array_equal(chunked_exposed_s(comm, window, np.ones(3), np.full(3, 4.0), overlap),
                                      comm - overlap * np.minimum(comm, window))


def test_interleaved_chunks_queue_their_reductions():
    # comm 10 s in 4 chunks of 2.5 s, window 4 s (1 s a chunk), pp 2: the chunks end their last
    # backward 2 s apart at T-6, T-4, T-2, T and each starts reducing 1 s before. Queue: T-7..T-4.5,
    # T-4.5..T-2, T-2..T+0.5, T+0.5..T+3: 3 s past the end of the backward.
    exposed = chunked_exposed_s(np.array([10.0]), np.array([4.0]), np.array([4.0]), np.array([2.0]), 1.0)
    assert exposed[0] == pytest.approx(3.0)
    # a short reduction: only the last chunk's 2.5 s, less its own 1 s window, stays exposed
    exposed = chunked_exposed_s(np.array([10.0]), np.array([4.0]), np.array([4.0]), np.array([8.0]), 1.0)
    assert exposed[0] == pytest.approx(1.5)


@given(seconds, seconds, st.integers(1, 16), st.integers(1, 64), st.floats(0.0, 1.0))
def test_chunks_never_expose_more_than_one_chunk_and_keep_the_last_share(comm, window, chunks, pp, overlap):
    one = chunked_exposed_s(np.array([comm]), np.array([window]), np.array([1.0]), np.array([float(pp)]), overlap)
    many = chunked_exposed_s(np.array([comm]), np.array([window]), np.array([float(chunks)]),
                             np.array([float(pp)]), overlap)
    assert 0.0 <= many[0] <= one[0] + 1e-12
    # the last chunk reduces after the backward ends, less its own window
    assert chunked_exposed_s(np.array([comm]), np.array([window]), np.array([float(chunks)]),
                             np.array([float(pp)]), 1.0)[0] >= (comm - window) / chunks - 1e-12
