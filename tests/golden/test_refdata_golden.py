"""Golden cases from the reference data (cases.yaml): ZeRO Fig. 1 model states, playbook
memory rows, and the conventions that turn published figures into tokens/s."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoplan.calibration.accuracy import zero_figure1_gb
from autoplan.calibration.fit import predict_rows
from autoplan.specs.models import load_model
from autoplan.calibration.sources import load_source, load_sources
from autoplan.calibration.validation import PLAYBOOK_MEMORY_UNIT, Row

CASES = yaml.safe_load(Path(__file__).with_name("cases.yaml").read_text(encoding="utf-8"))


def _ids(kind):
    return [c for c in CASES if c["kind"] == kind]


@pytest.mark.parametrize("case", _ids("zero_model_states"), ids=lambda c: f"zero{c['zero']}")
def test_zero_figure1(case):
    got = zero_figure1_gb(case["num_params"], case["dp"])[case["zero"]]
    assert got == pytest.approx(case["expected_gb"], rel=case["tolerance"]), case["source"]


@pytest.mark.parametrize("case", _ids("playbook_memory"), ids=lambda c: c["source"].split(", ")[1])
def test_playbook_memory(case):
    row = Row(source="golden", row_id="golden:1", model=load_model(case["model"]),
              hardware=case["hardware"], trainer=case["trainer"], layout=case["layout"])
    predicted = predict_rows([row])["peak_memory_bytes"][0]
    expected = case["expected_gb"] * PLAYBOOK_MEMORY_UNIT
    assert predicted == pytest.approx(expected, rel=case["tolerance"]), (
        f"{predicted / 1e9:.1f} GB vs {case['expected_gb']} GB ({case['source']})")


@pytest.mark.parametrize("case", _ids("derived_tokens"), ids=lambda c: c["row_id"])
def test_derived_tokens(case):
    rows = {r.row_id: r for r in load_source(case["source_name"]).rows}
    got = rows[case["row_id"]].tokens_per_s_per_gpu
    assert got == pytest.approx(case["expected_tokens_per_s_per_gpu"], rel=case["tolerance"])


def test_every_source_loads_with_resolvable_layouts():
    from autoplan.calibration.rows import row_context
    from autoplan.layout_records import layout_from_record

    for name, source in load_sources().items():
        assert source.rows, name
        for row in source.rows:
            lay = layout_from_record(row.layout, row_context(row).training)
            assert lay.dp * lay.mbs * lay.grad_acc == lay.gbs_seqs == row.layout["gbs_seqs"], row.row_id
            assert row.has_time or row.has_memory or row.status != "ok", row.row_id
        assert all(reason for _, reason in source.excluded), name
