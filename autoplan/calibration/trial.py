"""Trial runs of the plans the model cannot tell apart: one folder per plan with the trainer's
files (the export API, :func:`autoplan.export.export_plan`) set to a few steps with timing and
memory logging on, a run script, and the ``manifest.json`` that ``autoplan calibrate
--from-log`` and ``autoplan rerank`` read (:mod:`autoplan.calibration.trial_runs`).

Which plans: by default the plans ``search`` re-orders by robustness, those near-tied with the
best *and* predicted within ``REORDER_WITHIN`` of it (:func:`autoplan.search.ranking.reordered_count`,
:mod:`autoplan.report.near_ties`): below that gap the model's order is not evidence, so a
measurement decides. ``top`` overrides the count.

Per trainer, what a trial needs of its export (the launch script, the flags or file edits for
per-step timing and memory lines, the paths the user must give) is declared once, by its
exporter module as ``TRIAL`` (:class:`autoplan.export.launch.TrialRun`, read by :func:`trial_run`):
a trainer the export registry lists is one a trial can run.

There is one launch line per trainer, the exporter's: each folder's exported launch script
(:mod:`autoplan.export.launch`, written for ``--launcher torchrun`` or ``slurm``), which
``run.sh`` starts with the logging flags above (:func:`node_command`). Every path the user must
give is a ``${NAME:?...}`` that run.sh checks before anything starts.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.calibration.trial_runs import MANIFEST, MANIFEST_KIND
from autoplan.errors import AutoplanError
from autoplan.export.launch import LAUNCHERS, TrialRun, required_lines
from autoplan.export.registry import renderer_module

LOG_FILE = "train.log"
RUN_FILE = "run.sh"


def trial_count(data: Mapping[str, Any]) -> int:
    """How many leading plans of a plans.json the model cannot order: those near-tied with the
    best (the search's ``near_ties``) and predicted within ``REORDER_WITHIN`` of it."""
    from autoplan.search.ranking import reordered_count

    plans = data["plans"]
    tokens = np.array([float(p.get("tokens_per_s_per_gpu", np.nan)) for p in plans])
    near = int((data.get("near_ties") or {}).get("num_plans") or 1)
    return max(1, min(len(plans), reordered_count(tokens, min(near, len(plans)))))


def trial_run(trainer: str) -> TrialRun:
    """What the exporter of ``trainer`` declares for a trial run (its module's ``TRIAL``,
    :class:`autoplan.export.launch.TrialRun`): the one place per trainer."""
    return import_module(renderer_module(trainer)).TRIAL


def node_command(trainer: str, launcher: str) -> str:
    """The exported launch script with the trial's logging flags (``"$@"`` of its trainer line):
    run with bash (torchrun on this node), or submitted with ``sbatch --wait`` whose output file
    is the log (the script's ``#SBATCH`` lines reserve the nodes, its ``srun`` starts them)."""
    run = trial_run(trainer)
    words = " ".join([shlex.quote(run.launch_file), *map(shlex.quote, run.logging_args)])
    if launcher == "slurm":
        return f'sbatch --wait --chdir "$PWD" --output {LOG_FILE} {words}\ncat {LOG_FILE}\n'
    return f"bash {words} 2>&1 | tee {LOG_FILE}\n"


def run_script(trainer: str, rank: int, launcher: str, nodes: int, user_paths: Mapping[str, str],
               launch_text: str = "") -> str:
    """run.sh of one plan: checks the paths the export leaves to the user (the trial's
    ``user_paths``, and those the exported launch script ``launch_text`` stops on when unset),
    then starts that script (:func:`node_command`), its output going into train.log beside it:
    a missing path stops run.sh before any train.log is written."""
    checks = "".join(f'export {name}="${{{name}:?set {name} to {what}}}"\n' for name, what in user_paths.items())
    checks += "".join(f"export {line}\n" for line in required_lines(launch_text))
    if launcher == "torchrun" and nodes > 1:
        checks += 'export MASTER_ADDR="${MASTER_ADDR:?set MASTER_ADDR to node 0 (and NODE_RANK on each node)}"\n'
    start = "bash run.sh on each node" if launcher == "torchrun" else "bash run.sh on the login node: sbatch --wait"
    return ("#!/usr/bin/env bash\n"
            f"# autoplan trial: plan rank {rank} for {trainer} ({start}); output -> {LOG_FILE}, read by "
            "autoplan calibrate --from-log / rerank\n" "set -euo pipefail\n" 'cd "$(dirname "$0")"\n'
            + checks + node_command(trainer, launcher))


def plan_training(data: Mapping[str, Any], record: Mapping[str, Any], model):
    """The TrainingSpec of a plan record with the plans.json's recorded cluster and setup."""
    from autoplan.report.plan_inputs import recorded_inputs
    from autoplan.specs.hardware import load_gpu, make_cluster
    from autoplan.specs.training import TrainingSpec

    recorded, _ = recorded_inputs(data)
    cluster = make_cluster(load_gpu(str(recorded["hardware"])), int(record["gpus"]),
                           gpus_per_node=recorded.get("gpus_per_node"), nic_bytes_per_s=recorded.get("nic_bytes_per_s"))
    names = {f.name for f in dataclasses.fields(TrainingSpec)}
    setup = {k: v for k, v in (data.get("setup") or {}).items() if k in names and v is not None}
    return TrainingSpec(cluster, int(record.get("seq_len") or model.seq_len), int(record["gbs_seqs"]),
                        flops_convention=recorded.get("flops_convention", "playbook"), **setup)


def _check_runnable(chosen, model, trainer: str, data: Mapping[str, Any]) -> None:
    """Every chosen plan renders for ``trainer`` (its rules), or one error naming the plan."""
    from autoplan.export import render
    from autoplan.export import plan_training as batch_training
    from autoplan.layout_records import layout_from_record

    for rank, record, training in chosen:
        layout = layout_from_record(record, training)
        try:
            render(trainer, model, layout, batch_training(layout, training))
        except AutoplanError as exc:
            searched = data.get("trainer") or "another trainer"
            raise AutoplanError(f"plan rank {rank}: {exc}; the plans were searched for {searched}: search with "
                                f"--trainer {trainer} for plans {trainer} runs, or pick others with --top") from None


def write_trial(plans_path: str | Path, trainer: str, out_dir: str | Path, *, steps: int = 20,
                top: int | None = None, launcher: str = "torchrun", skip_steps: int = 2) -> dict[str, Any]:
    """Write the trial folders and the manifest; returns the manifest."""
    from autoplan.export import LaunchOptions, export_plan, parse_trainers, read_plans
    from autoplan.layout_records import layout_from_record
    from autoplan.specs.models import load_model

    trainer = parse_trainers(trainer)[0]
    if launcher not in LAUNCHERS:
        raise AutoplanError(f"unknown launcher {launcher!r}; known: {', '.join(LAUNCHERS)}")
    if steps <= skip_steps:
        raise AutoplanError(f"--steps {steps} must exceed the {skip_steps} warm-up steps the logs' median drops")
    data = read_plans(plans_path)
    from autoplan.report.plan_inputs import recorded_inputs

    model = load_model(str(recorded_inputs(data)[0]["model"]))  # the searched file (a config.json), else the preset
    count = min(top, len(data["plans"])) if top else trial_count(data)
    out = Path(out_dir)
    chosen = [(int(r.get("rank", i + 1)), r, plan_training(data, r, model)) for i, r in enumerate(data["plans"][:count])]
    _check_runnable(chosen, model, trainer, data)  # before anything is written
    runs, run = [], trial_run(trainer)
    for rank, record, training in chosen:
        folder = out / f"rank-{rank}"
        launch = LaunchOptions(train_steps=steps, warmup_steps=max(1, steps // 4),  # Megatron: warmup < decay
                               launcher=launcher)
        written = export_plan(record, model, trainer, folder, training, launch)
        if run.logging_on is not None:
            run.logging_on(folder)
        files = [p.name for p in written]
        per_node = training.cluster.gpus_per_node
        paths = run.user_paths(layout_from_record(record, training))
        launch_text = (folder / run.launch_file).read_text(encoding="utf-8")
        script = run_script(trainer, rank, launcher, max(1, training.gpus // per_node), paths, launch_text)
        from autoplan.report.destination import write_text

        write_text(folder / RUN_FILE, script, executable=True)
        runs.append({"rank": rank, "folder": folder.name, "script": f"{folder.name}/{RUN_FILE}",
                     "log": f"{folder.name}/{LOG_FILE}", "files": files,
                     "predicted": {k: record.get(k) for k in ("step_time_s", "tokens_per_s_per_gpu", "peak_memory_gib")},
                     "plan": dict(record)})
    manifest = {"kind": MANIFEST_KIND, "plans": str(Path(plans_path).resolve()), "trainer": trainer,
                "log_format": trainer, "launcher": launcher, "steps": steps, "skip_steps": skip_steps,
                "model": model.name, "hardware": data.get("hardware"),
                "next": [f"bash {r['script']}" for r in runs]
                + [f"autoplan calibrate --from-log {shlex.quote(str(out))} -o fitted.yaml",
                   f"autoplan rerank {shlex.quote(str(plans_path))} --logs {shlex.quote(str(out))}"],
                "runs": runs}
    from autoplan.calibration.trial_runs import write_json

    write_json(out / MANIFEST, manifest)
    return manifest
