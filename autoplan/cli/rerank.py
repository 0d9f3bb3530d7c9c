"""`autoplan rerank`: the plans of a plans.json re-ordered by what their trial runs measured."""

from __future__ import annotations

import math

import click

from autoplan.calibration.log_import import LOG_FORMATS
from autoplan.cli.options import SEED
from autoplan.cli.render import emit_records
from autoplan.errors import escape

COLUMNS = ["new_rank", "old_rank", "tokens_per_s_per_gpu", "band_tokens", "predicted_step_time_s",
           "measured_step_time_s", "refit_step_time_s", "why"]
HEADERS = {"new_rank": "rank", "old_rank": "was", "tokens_per_s_per_gpu": "tokens/s/GPU",
           "band_tokens": "band (tokens/s/GPU)", "predicted_step_time_s": "predicted s",
           "measured_step_time_s": "measured s", "refit_step_time_s": "refit s", "why": "why"}


def _seconds(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3g}"


@click.command("rerank")
@click.argument("plans_path", type=click.Path(dir_okay=False))
@click.option("--logs", "logs", multiple=True, required=True, type=click.Path(),
              help="The trial folder `autoplan trial` wrote (its manifest.json), or log files whose paths "
                   "name their plan's rank (rank-<N>/train.log); repeatable.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None,
              help="Trainer that wrote the logs [default: the trial's, else the plans' trainer].")
@click.option("--trainer", default=None, help="Trainer profile the runs ran [default: the trial's or the plans'].")
@click.option("--skip-steps", type=click.IntRange(0, 10**6), default=2, show_default=True,
              help="Warm-up: logged steps dropped before the median (the trial's manifest overrides it).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the refit's random starts and folds.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the refit profile YAML here (as `autoplan calibrate --from-log` does).")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Output format of the re-ranked plans (csv and json: every column).")
def rerank_command(plans_path, logs, log_format, trainer, skip_steps, seed, output_path, output_format) -> None:
    """Re-rank PLANS.json by the trial runs that measured some of its plans.

    \b
    autoplan trial plans.json --to megatron --steps 20 -o trial/   (then run trial/rank-*/run.sh)
    autoplan rerank plans.json --logs trial/

    The measured plans are ranked by their measured tokens/s per GPU (their band: the spread of
    their steps after warm-up); the others by the profile refitted on the runs (autoplan
    calibrate's guarded fit; their band: the refit's error on the runs, or the shipped band
    with fewer than 3 runs). Each row says what moved it: measured vs predicted step time.
    """
    from autoplan.calibration.measured import check_profile_path
    from autoplan.calibration.trial_runs import calibrate_from_logs, log_profile_mapping, rerank

    if output_path:
        check_profile_path(output_path)  # before the refit
    click.echo(f"[rerank] reading {len(logs)} log argument(s) and refitting ...", err=True)
    result = calibrate_from_logs(list(logs), plans_path, fmt=log_format, trainer=trainer, skip_steps=skip_steps,
                                 seed=seed, require_fit=False)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    cal = result.calibration
    if cal is None:
        click.echo(f"  note: no refit, the starting profile predicts the plans not run: {result.refit_error}",
                   err=True)
    for line in (cal.report.warnings if cal else []):
        click.echo(f"  warning: {line}", err=True)
    if cal and cal.cv_note:
        click.echo(f"  note: {cal.cv_note}", err=True)
    records = rerank(result)
    if output_path:
        from autoplan.calibration.measured import write_profile

        path = write_profile(output_path, log_profile_mapping(result, "soft_l1"))
        click.echo(f"wrote {escape(str(path))}; use it with: --trainer {result.context.profile.name} --hardware "
                   f"{result.context.gpu.name} --profile {escape(str(path))}", err=True)
    if output_format != "table":
        emit_records(records, output_format, columns=list(records[0]), json_key="plans")
        return
    for r in records:
        r["band_tokens"] = f"{r['tokens_per_s_per_gpu_low']:,.0f}-{r['tokens_per_s_per_gpu_high']:,.0f}"
    moved = sum(r["new_rank"] != r["old_rank"] for r in records)
    emit_records(records, "table", columns=COLUMNS, headers=HEADERS,
                 title=f"Plans re-ranked by {len(result.measured)} trial run(s) ({result.context.profile.name} on "
                       f"{result.context.gpu.name})",
                 formatters={"tokens_per_s_per_gpu": lambda v: f"{v:,.0f}", "predicted_step_time_s": _seconds,
                             "measured_step_time_s": _seconds, "refit_step_time_s": _seconds})
    others = next((r["band"] for r in records if not r["measured"]), "")
    click.echo(f"{moved} of {len(records)} plans moved; a measured plan's band is the spread of its steps"
               + (f", the others': {others}" if others else ""))
