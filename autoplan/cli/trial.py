"""`autoplan trial`: run scripts for the plans the model cannot tell apart, a few steps each."""

from __future__ import annotations

import click

from autoplan.calibration.trial import LAUNCHERS
from autoplan.errors import escape
from autoplan.export.registry import TRAINERS


@click.command("trial")
@click.argument("plans_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "trainer", required=True, type=click.Choice(TRAINERS),
              help="Trainer to run the plans with.")
@click.option("--top", type=click.IntRange(1, 64), default=None,
              help="Run the first K plans [default: those the model cannot order, near-tied with the best and "
                   "predicted within 5% of it].")
@click.option("--steps", type=click.IntRange(3, 10**6), default=20, show_default=True,
              help="Training steps of each run (the first 2 are dropped as warm-up when the logs are read).")
@click.option("--launcher", type=click.Choice(LAUNCHERS), default="torchrun", show_default=True,
              help="How run.sh starts the nodes: torchrun on this node (NODE_RANK, MASTER_ADDR for several) "
                   "or srun under sbatch.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), default="trial", show_default=True,
              help="Folder to write (one rank-<N>/ per plan and manifest.json).")
def trial_command(plans_path, trainer, top, steps, launcher, out_dir) -> None:
    """Write, for the plans the model cannot tell apart, a folder each to run them N steps.

    \b
    autoplan trial plans.json --to megatron --steps 20 -o trial/
    MEGATRON_LM=/path/to/Megatron-LM bash trial/rank-1/run.sh     (each run; output -> train.log)
    autoplan rerank plans.json --logs trial/

    Each folder holds the exported config (timing and memory logging on), run.sh and, once run,
    train.log; manifest.json names each run's plan and log for `calibrate --from-log` and
    `rerank`. Paths the scripts need fail loudly when unset.
    """
    from autoplan.calibration.trial import write_trial

    manifest = write_trial(plans_path, trainer, out_dir, steps=steps, top=top, launcher=launcher)
    runs = manifest["runs"]
    click.echo(f"wrote {len(runs)} trial run(s) to {escape(out_dir)}/ (plans of rank "
               f"{', '.join(str(r['rank']) for r in runs)}, {steps} steps, {launcher}); next:", err=True)
    for line in manifest["next"]:
        click.echo(f"  {line}")
