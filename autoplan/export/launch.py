"""The launch script of an export: torchrun on each node, or a Slurm batch script.

``launch_script(shape, entry, launcher)`` returns the text of a bash script that starts
``entry`` (the trainer's program, its arguments and the checks and settings before it) on the
plan's nodes, with the cluster's GPUs per node as processes per node
(:func:`autoplan.export.common.launch_shape`):

* ``torchrun``: run it on every node with ``NODE_RANK`` and ``MASTER_ADDR`` set (a static
  rendezvous, torchrun's ``--node-rank``/``--master-addr``);
* ``slurm``: ``sbatch`` it; ``#SBATCH --nodes/--ntasks-per-node 1/--gpus-per-node`` reserve the
  nodes, ``srun`` starts one torchrun per node, and torchrun's c10d rendezvous
  (``--rdzv-backend c10d --rdzv-endpoint`` the first node of ``scontrol show hostnames
  "$SLURM_JOB_NODELIST"``, ``--rdzv-id "$SLURM_JOB_ID"``) numbers the nodes itself
  (torch.distributed.run's elastic launch; Slurm's sbatch/srun manuals).

Paths a run needs but the export was not given are required environment variables: the script
stops with ``${NAME:?set NAME to ...}`` before anything starts (:func:`required`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoplan.export.common import ExportError, commented

LAUNCHERS = ("torchrun", "slurm")
MASTER_PORT = 29500  # torchrun's default --master-port


@dataclass(frozen=True)
class LaunchShape:
    """Processes per node and nodes (``common.launch_shape`` of the plan's training setup)."""

    per_node: int
    nodes: int


@dataclass(frozen=True)
class Entry:
    """What torchrun runs: ``program`` (a script path or ``-m module``, already shell words),
    ``setup`` (bash lines before the launch: required paths, exports, the ARGS array) and
    ``args`` (shell words after the program)."""

    program: str
    setup: str = ""
    args: str = '"$@"'


@dataclass(frozen=True)
class TrialRun:
    """What ``autoplan trial`` needs of a trainer's export to run it a few steps with per-step
    logs (:mod:`autoplan.calibration.trial`), declared by each renderer module as ``TRIAL``:
    ``launch_file`` (the export's launch script, which run.sh starts), ``logging_args`` (added
    to its trainer line for per-step timing and memory lines), ``user_paths`` (layout ->
    environment variable -> what the user must set it to; run.sh checks them before anything
    starts) and ``logging_on`` (edits of the written files the logs need, if any)."""

    launch_file: str
    logging_args: tuple[str, ...]
    user_paths: Callable[[object], Mapping[str, str]]
    logging_on: Callable[[Path], None] | None = None


def required(name: str, what: str, given: str | None = None) -> str:
    """The bash line that sets ``name``: the export's ``given`` value (the environment may
    override it), else the environment's, stopping the script with ``what`` when unset."""
    if given:
        return f'{name}="${{{name}:-{_inner(given)}}}"\n'
    return f'{name}="${{{name}:?set {name} to {_message(what)}}}"\n'


def required_lines(script: str) -> list[str]:
    """The lines of a launch script that :func:`required` wrote without a value (those that
    stop the script when unset), in order: what a wrapper checks before it starts the script."""
    return [line for line in script.splitlines()
            if (name := line.split("=", 1)[0]).isidentifier() and line.startswith(f'{name}="${{{name}:?')]


def _inner(value: str) -> str:
    """``value`` safe inside a double-quoted ``${NAME:-...}`` default."""
    return "".join("\\" + ch if ch in '\\"$`}' else ch for ch in value)


def _message(text: str) -> str:
    """Error text for ``${NAME:?...}``: no quotes, braces, dollars or backquotes."""
    return "".join(ch for ch in text if ch not in '"\'`${}\\\n')


def check_launcher(launcher: str) -> str:
    if launcher not in LAUNCHERS:
        raise ExportError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    return launcher


def launch_script(shape: LaunchShape, entry: Entry, launcher: str, header: Sequence[str],
                  job_name: str = "autoplan") -> str:
    """The whole script: shebang, the ``#SBATCH`` lines (slurm), the header comment, the
    entry's setup and the launch line."""
    check_launcher(launcher)
    sbatch = ""
    if launcher == "slurm":
        sbatch = (f"#SBATCH --job-name={_message(job_name).replace(' ', '_')}\n#SBATCH --nodes={shape.nodes}\n"
                  f"#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node={shape.per_node}\n#SBATCH --exclusive\n")
    return ("#!/usr/bin/env bash\n" + sbatch + commented(header) + "set -euo pipefail\n"
            + f"NPROC_PER_NODE={shape.per_node}\nNNODES={shape.nodes}\n" + entry.setup
            + launch_line(entry, launcher))


def launch_line(entry: Entry, launcher: str) -> str:
    """torchrun with a static rendezvous (one call per node), or srun + torchrun's c10d one."""
    tail = f"    {entry.program} {entry.args}\n"
    if launcher == "torchrun":
        return ('exec torchrun --nproc-per-node "$NPROC_PER_NODE" --nnodes "$NNODES" '
                '--node-rank "${NODE_RANK:-0}" \\\n'
                f'    --master-addr "${{MASTER_ADDR:-localhost}}" --master-port "${{MASTER_PORT:-{MASTER_PORT}}}" \\\n'
                + tail)
    # (the host list first: under pipefail, `scontrol ... | head -n1` fails when head closes the pipe)
    return ('NODE_NAMES="$(scontrol show hostnames "$SLURM_JOB_NODELIST")"\n'
            'MASTER_ADDR="$(head -n1 <<< "$NODE_NAMES")"\n'
            f'MASTER_PORT="${{MASTER_PORT:-{MASTER_PORT}}}"\n'
            'exec srun --nodes "$NNODES" --ntasks-per-node 1 \\\n'
            '    torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \\\n'
            '    --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\\n'
            + tail)


def how_to_run(script: str, launcher: str, nodes: int, env: str = "") -> str:
    """The header's launch line for ``script``."""
    prefix = f"{env} " if env else ""
    if launcher == "slurm":
        return f"{prefix}sbatch {shlex.quote(script)}   (from this folder; Slurm starts the {nodes} node(s))"
    return (f"{prefix}NODE_RANK=<0..{nodes - 1}> MASTER_ADDR=<node 0> bash {shlex.quote(script)}   "
            f"(on each of the {nodes} node(s), from this folder)")
