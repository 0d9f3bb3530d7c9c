"""`autoplan probe`: measure this machine's kernels and collectives, write --hardware and --profile files."""

from __future__ import annotations

import functools
import time

import click

from autoplan.errors import AutoplanError


def _progress(start: float, message: str) -> None:
    """One progress line on stderr with the seconds since ``start`` (a rank of its own process
    prints it: a module-level function, so that a spawned rank can be handed it)."""
    click.echo(f"[{time.time() - start:5.1f} s] {message}", err=True)


def _gb(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"


def _summary(result, seconds: float) -> list[str]:
    k, p = result.kernels, result.probed.parameters
    lines = [f"probed {result.meta.get('device')} ({result.meta.get('ranks')} ranks, {result.meta.get('nodes')} "
             f"node(s), {result.meta.get('backend')}) in {seconds:.1f} s",
             f"  GEMM bf16: {k.gemm_bf16.efficiency * result.probed.gpu.compute_peak_bf16_flops_per_s / 1e12:.4g} "
             f"TFLOP/s at large sizes, gemm_efficiency_max {p['gemm_efficiency_max']:.3f}, gemm_half_flops "
             f"{p['gemm_half_flops']:.3g} FLOP (fixed {k.gemm_bf16.fixed_s * 1e6:.3g} us per GEMM; median error "
             f"{k.gemm_bf16.median_error:.1%} over {k.gemm_bf16.n})"]
    if k.fp8_speedup:
        lines.append("  FP8 over BF16 (large GEMMs): " + ", ".join(f"{r} {s:.3f}x" for r, s in k.fp8_speedup.items()))
    lines += [f"  attention ({k.attention_backend}, fwd+bwd): attention_efficiency {p['attention_efficiency']:.3f}, "
              f"attention_half_seq_tokens {p['attention_half_seq_tokens']:.4g}",
              f"  memory copy: {_gb(k.copy_bytes_per_s)}, hbm_efficiency {p['hbm_efficiency']:.3f}"]
    for f in result.collectives:
        lines.append(f"  {f.level} {f.collective} over {f.ranks}: latency {f.latency_s * 1e6:.3g} us "
                     f"({f.hop_latency_s * 1e6:.3g} us per hop), busbw {_gb(f.busbw_bytes_per_s)}, "
                     f"median error {f.median_error:.1%}")
    for level in ("scale_up", "scale_out"):
        if f"{level}_efficiency" in p:
            lines.append(f"  {level}_efficiency {p[f'{level}_efficiency']:.3f}")
    lines += [f"  note: {note}" for note in result.probed.notes]
    return lines


@click.command("probe")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cuda", show_default=True,
              help="Where to measure: the GPUs (NCCL between them) or the CPU (gloo).")
@click.option("--quick", is_flag=True, help="A few sizes of each measurement (about a minute).")
@click.option("--nproc", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Local ranks to spawn (one per GPU); under torchrun or srun the launcher's ranks are used.")
@click.option("-m", "--model", "model_name", default=None,
              help="Time the GEMM shapes and attention lengths of this model (preset or config.json; on CUDA).")
@click.option("--out", default="results/probe", show_default=True, type=click.Path(file_okay=False),
              help="Folder for hardware.yaml, profile.yaml and the measured tables.")
@click.option("--trainer", default="megatron", show_default=True,
              help="The trainer profile the probed parameters go on top of (profile.yaml's trainer).")
@click.option("--hardware", default=None,
              help="The datasheet preset of this GPU (default: matched by the device's name).")
@click.option("--name", default=None, help="Name of the probed GPU in hardware.yaml (default '<preset>-probed').")
@click.option("--attention-backend", type=click.Choice(["", "flash", "cudnn", "sdpa"]), default="",
              help="Whose attention curve goes into the profile (default: flash on CUDA, sdpa on a CPU).")
@click.option("--ranks-per-node", type=click.IntRange(1, 1024), default=None, hidden=True,
              help="Ranks per node (default: torchrun's LOCAL_WORLD_SIZE, else --nproc); fewer tests the cross-node path.")
def probe_command(device, quick, nproc, model_name, out, trainer, hardware, name, attention_backend, ranks_per_node):
    """Measure GEMMs, attention, memory copies, the host link and collectives here, and write a
    hardware file and a calibrated profile for --hardware FILE and --profile FILE.

    \b
    One node:     autoplan probe --nproc 8 --out results/probe
    Many nodes:   torchrun --nnodes 4 --nproc-per-node 8 ... -m autoplan probe --out results/probe
    Then:         autoplan search -m 70b -g 512 --gbs-tokens 4M \\
                    --hardware results/probe/hardware.yaml --profile results/probe/profile.yaml
    """
    from autoplan.probe import TORCH_MISSING, torch_available

    if not torch_available():
        raise AutoplanError(TORCH_MISSING)
    from autoplan.probe.run import ProbeOptions, run_probe
    from autoplan.profiles import load_profile
    from autoplan.specs.models import load_model

    from autoplan.specs.hardware import load_gpu

    load_profile(trainer)  # an unknown trainer or preset is refused before any measurement
    if hardware:
        load_gpu(hardware)
    model = load_model(model_name) if model_name else None
    if model is not None and device == "cpu":
        click.echo("note: on a CPU the probe times tiny sizes; --model's shapes are timed on CUDA", err=True)
    options = ProbeOptions(device=device, quick=quick, nproc=nproc, ranks_per_node=ranks_per_node, model=model,
                           out=out, trainer=trainer, hardware=hardware, name=name, attention_backend=attention_backend)
    start = time.time()
    result = run_probe(options, functools.partial(_progress, start))
    if result is None:  # a rank other than 0 of torchrun / srun
        return
    for line in _summary(result, time.time() - start):
        click.echo(line)
    click.echo("Wrote " + ", ".join(str(p) for p in result.files))
    click.echo(f"Use: --hardware {result.files[-2]} --profile {result.files[-1]} --trainer {trainer}")
