#!/usr/bin/env bash
# One cached virtual environment per trainer for `pytest -m trainers` (docs/export.md).
# megatron-core 0.15.3 pins numpy < 2 while torchtitan 0.3.0 needs numpy 2, so one environment
# cannot hold both. Prints the AUTOPLAN_<TRAINER>_PYTHON exports to paste (or eval).
#   eval "$(bash tests/trainers/setup_envs.sh)"
#   MEGATRON_LM=/path/to/Megatron-LM@core_v0.15.3 pytest -m trainers tests/trainers
set -euo pipefail
CACHE="${AUTOPLAN_TRAINER_ENVS:-$HOME/.cache/autoplan-trainer-envs}"
declare -A PACKAGES=(
    [megatron]="numpy<2 megatron-core==0.15.3 einops pyyaml packaging"
    [torchtitan]="torchtitan==0.3.0"
    [deepspeed]="deepspeed==0.19.8"
)
for trainer in megatron torchtitan deepspeed; do
    env="$CACHE/$trainer"
    if [ ! -x "$env/bin/python" ]; then
        python3 -m venv "$env" >&2
        "$env/bin/pip" install -q torch >&2
        # shellcheck disable=SC2086
        "$env/bin/pip" install -q --no-build-isolation ${PACKAGES[$trainer]} >&2
    fi
    echo "export AUTOPLAN_${trainer^^}_PYTHON=$env/bin/python"
done
