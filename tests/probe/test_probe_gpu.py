"""`autoplan probe` on a CUDA GPU against the project's own kernel tables of that GPU
(``pytest -m probe``; skipped without PyTorch, without a GPU, or on a GPU no table was measured on).

Issue 45: the probe's GEMM, attention, HBM and host-link figures within 5% of
``validation/h200_kernels.csv`` / ``h200_host_link.csv`` (``benchmarks/gpu_kernels.py``,
``gpu_host_link.py`` on an H200), each side fitted by the same functions of
``autoplan.calibration.kernels`` over the shapes both timed."""

from __future__ import annotations

import pytest

from autoplan.calibration.host_link import host_link_figures
from autoplan.calibration.kernels import attention_curve, fit_linear_time, fp8_speedups, read_table
from autoplan.cost.host_link import HOST_LINK_EFFICIENCY
from autoplan.paths import data_dir
from autoplan.probe.tables import as_table

pytestmark = pytest.mark.probe
TOLERANCE = 0.05  # issue 45, "Done when"
TABLES = {"h200": ("h200_kernels.csv", "h200_host_link.csv"), "h100-sxm": ("h100_sxm_kernels.csv", None)}
GEMM_KEY = ("h", "tp", "tokens", "note", "pass")


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from autoplan.probe.run import ProbeOptions, preset_for, run_probe

    preset = preset_for(torch.cuda.get_device_name())
    if preset is None or preset.name not in TABLES:
        pytest.skip(f"no shipped kernel table for {torch.cuda.get_device_name()}")
    out = tmp_path_factory.mktemp("probe")
    result = run_probe(ProbeOptions(device="cuda", quick=True, out=str(out)))
    kernels, host = TABLES[preset.name]
    shipped = read_table(data_dir("validation") / kernels)
    shipped_host = read_table(data_dir("validation") / host) if host else None
    return result, read_table(out / "kernels.csv"), shipped, shipped_host, preset


def _common_gemms(mine, theirs, kind):
    keys = {tuple(r[k] for k in GEMM_KEY) for r in mine.select(kind=kind) if r["seconds"]}
    return [r for r in theirs.select(kind=kind) if r["seconds"] and tuple(r[k] for k in GEMM_KEY) in keys]


def test_gemm_curve_within_5_percent(probed):
    result, mine, shipped, _, gpu = probed
    peak = gpu.compute_peak_bf16_flops_per_s
    theirs = _common_gemms(mine, shipped, "gemm_bf16")
    assert theirs, "no GEMM shape in common with the shipped table"
    ref = fit_linear_time([r["flops"] for r in theirs], [r["seconds"] for r in theirs], peak)
    assert result.kernels.gemm_bf16.efficiency == pytest.approx(ref.efficiency, rel=TOLERANCE)
    for recipe in ("tensorwise", "rowwise"):
        mine_s = fp8_speedups(mine, recipe).median
        ref_s = fp8_speedups(as_table(shipped.meta, _common_gemms(mine, shipped, "gemm_bf16")
                                      + _common_gemms(mine, shipped, f"gemm_fp8_{recipe}")), recipe).median
        assert mine_s == pytest.approx(ref_s, rel=TOLERANCE), recipe


@pytest.mark.parametrize("backend", ["flash", "cudnn"])
def test_attention_within_5_percent_at_each_length(probed, backend):
    _, mine, shipped, _, gpu = probed
    peak = gpu.compute_peak_bf16_flops_per_s
    heads = {r["heads"] for r in mine.select(kind=f"attention_{backend}")}
    theirs = as_table(shipped.meta, [r for r in shipped.select(kind=f"attention_{backend}") if r["heads"] in heads])
    measured, ref = attention_curve(mine, backend, peak).by_seq, attention_curve(theirs, backend, peak).by_seq
    for seq, fraction in measured.items():
        assert fraction == pytest.approx(ref[seq], rel=TOLERANCE), seq


def test_hbm_and_host_link_within_5_percent(probed):
    result, _, shipped, shipped_host, gpu = probed
    copy = max(r["bytes"] / r["seconds"] for r in shipped.select(kind="hbm_copy") if r["seconds"])
    assert result.kernels.copy_bytes_per_s == pytest.approx(copy, rel=TOLERANCE)
    if shipped_host is None:
        pytest.skip("no shipped host-link table for this GPU")
    theirs = host_link_figures(shipped_host, gpu.host_bytes_per_s).one_way
    mine = result.probed.gpu.host_bytes_per_s * HOST_LINK_EFFICIENCY / gpu.host_bytes_per_s  # the payload again
    assert mine == pytest.approx(theirs, rel=TOLERANCE)
