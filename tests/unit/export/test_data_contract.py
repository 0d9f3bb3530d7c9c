"""Contract (issue 46): no export trains on synthetic data unless exported with ``--mock-data``.

For every golden plan and trainer, the export without a data path must not name the trainer's
synthetic data set, and its launch script must stop when ``DATA_PATH`` is unset (plain DeepSpeed:
when ``TRAIN_SCRIPT``, the user's script that reads the data, is unset); exported with
``mock_data``, the same plan names it (so each marker below is one the exporter really writes).
The synthetic sets: Megatron-LM ``--mock-data`` (megatron/training/arguments.py) with
NullTokenizer; Megatron-Bridge ``dataset.mock`` (its mock GPT dataset); nanotron ``dataset: null``
(its dummy data generator, src/nanotron/config/config.py DataArgs); torchtitan's ``c4_test``
sample (torchtitan/hf_datasets). Megatron-DeepSpeed and plain DeepSpeed have none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.export import LaunchOptions, render
from autoplan.export.launch import required_lines
from autoplan.specs.models import load_model

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "export"
CASES = yaml.safe_load((GOLDEN / "cases.yaml").read_text())["cases"]
RUNS = [pytest.param(c, t, id=f"{c['name']}-{t}") for c in CASES for t in c["trainers"]]


def _synthetic(trainer: str, files: dict[str, str]) -> bool | None:
    """Whether the files train on the trainer's synthetic set (None: the trainer has none)."""
    if trainer == "megatron":
        script = files["megatron_pretrain_gpt.sh"]
        return "    --mock-data\n" in script or "NullTokenizer" in script
    if trainer == "megatron-bridge":
        return yaml.safe_load(files["megatron_bridge_overrides.yaml"])["dataset"]["mock"] is True
    if trainer == "nanotron":
        stages = yaml.safe_load(files["nanotron_config.yaml"])["data_stages"]
        return any(stage["data"]["dataset"] is None for stage in stages)
    if trainer == "torchtitan":
        return "dataset='c4_test'" in files["torchtitan_autoplan.py"]
    return None


def _files(case, trainer: str, launch: LaunchOptions) -> dict[str, str]:
    name = case["model"]
    model = load_model(GOLDEN / name if name.endswith(".json") else name)
    layout, training = plan_from_record(case["layout"])
    return render(trainer, model, layout, training, launch,
                  trainer_version=case.get("trainer_version", {}).get(trainer)).files


@pytest.mark.parametrize(("case", "trainer"), RUNS)
def test_no_golden_export_trains_on_synthetic_data_unasked(case, trainer):
    files = _files(case, trainer, LaunchOptions())
    assert _synthetic(trainer, files) in (False, None)
    required = {line.split("=", 1)[0] for name, text in files.items() if name.endswith(".sh")
                for line in required_lines(text)}
    # plain DeepSpeed (tp = pp = 1) runs the user's TRAIN_SCRIPT, which reads its own data
    assert "DATA_PATH" in required or (trainer == "deepspeed" and "TRAIN_SCRIPT" in required), required
    asked = _files(case, trainer, LaunchOptions(mock_data=True))
    assert _synthetic(trainer, asked) in (True, None)
