"""Rule pp_schedule_vpp (a table look-up, rules.schedules._VPP_RANGE) against its invariant in
words: interleaved needs vpp > 1; zb-v and dualpipev exactly 2; 1f1b, afab and dualpipe 1;
zb-h1 and 'default' any vpp."""

from __future__ import annotations

import numpy as np

from autoplan.layout import PP_SCHEDULES
from autoplan.rules.schedules import _vpp_broken

ALLOWED_VPP = {"default": {1, 2, 3, 4}, "1f1b": {1}, "interleaved": {2, 3, 4}, "afab": {1},
               "zb-h1": {1, 2, 3, 4}, "zb-v": {2}, "dualpipe": {1}, "dualpipev": {2}}


class _Batch:
    def __init__(self, pp_schedule, vpp):
        self.pp_schedule, self.vpp = pp_schedule, vpp


def test_every_schedule_and_vpp():
    assert set(ALLOWED_VPP) == set(PP_SCHEDULES)
    pairs = [(code, name, vpp) for code, name in enumerate(PP_SCHEDULES) for vpp in (1, 2, 3, 4)]
    codes = np.array([float(code) for code, _, _ in pairs])
    vpps = np.array([float(vpp) for _, _, vpp in pairs])
    broken = _vpp_broken(_Batch(codes, vpps))
    expected = np.array([vpp not in ALLOWED_VPP[name] for _, name, vpp in pairs])
    assert broken.dtype == bool and broken.shape == (len(pairs),)
    np.testing.assert_array_equal(broken, expected)
