#!/usr/bin/env bash
# One cached virtual environment per trainer for `pytest -m trainers` (docs/export.md).
# megatron-core 0.15.3 pins numpy < 2 while torchtitan 0.3.0 needs numpy 2, so one environment
# cannot hold both. Prints the exports to paste (or eval):
#   eval "$(bash tests/trainers/setup_envs.sh)" && pytest -m trainers tests/trainers
# Environments live in $AUTOPLAN_TRAINER_ENVS (default ~/.cache/autoplan-trainer-envs); a
# trainer whose environment holds the packages below is not installed again; one whose list changed
# gets the new packages installed into it (delete its folder to redo it from scratch).
# Megatron-LM's own pretrain_gpt.py checks need a checkout at tag core_v0.15.3: give it as
# MEGATRON_LM, or the script clones it into the cache (needs github.com).
set -euo pipefail
CACHE="${AUTOPLAN_TRAINER_ENVS:-$HOME/.cache/autoplan-trainer-envs}"
# The CPU wheel of torch 2.13.0 is the torch these checks run on (none needs a GPU); another
# torch would be a multi-GB download.
TORCH="torch==2.13.0"
MEGATRON_TAG="core_v0.15.3"
# What each check imports (tests/trainers/test_with_real_trainers.py), pinned:
# * megatron: megatron-core's TransformerConfig and micro-batch calculator; Megatron-LM's
#   arguments.py and tokenizer modules import six and regex at parse time.
# * torchtitan 0.3.0: its own requirements (spmd_types, tyro, datasets, ...) and triton, which
#   it does not declare but imports whenever a model module loads (models/common/token_dispatcher.py
#   -> distributed/minimal_async_ep/kernels.py `import triton`); on a CPU it only imports, its
#   @triton.jit kernels compile on first GPU use. 3.8.0 is the wheel on this machine's index.
# * deepspeed 0.19.8: DeepSpeedConfig (its own requirements); transformers 5.22.2 for the CPU
#   training runs (tests/trainers/deepspeed_train.py builds the Hugging Face model; AutoEP's
#   mixtral/qwen3_moe presets need transformers >= 5.0.0, auto_ep_presets/*.py).
declare -A PACKAGES=(
    [megatron]="numpy<2 megatron-core==0.15.3 einops==0.8.1 pyyaml packaging six==1.17.0 regex"
    [torchtitan]="torchtitan==0.3.0 triton==3.8.0"
    [deepspeed]="deepspeed==0.19.8 transformers==5.22.2"
)
for trainer in megatron torchtitan deepspeed; do
    env="$CACHE/$trainer"
    want="$TORCH ${PACKAGES[$trainer]}"
    if [ "$(cat "$env/.installed" 2>/dev/null)" != "$want" ]; then  # (.installed is written last)
        [ -x "$env/bin/python" ] || python3 -m venv --clear "$env" >&2
        # shellcheck disable=SC2086
        "$env/bin/python" -m pip install -q $want >&2
        echo "$want" > "$env/.installed"
    fi
    echo "export AUTOPLAN_${trainer^^}_PYTHON=$env/bin/python"
done
if [ -z "${MEGATRON_LM:-}" ]; then
    MEGATRON_LM="$CACHE/Megatron-LM-$MEGATRON_TAG"
    if [ ! -f "$MEGATRON_LM/pretrain_gpt.py" ]; then
        git clone -q --depth 1 --branch "$MEGATRON_TAG" https://github.com/NVIDIA/Megatron-LM "$MEGATRON_LM" >&2 \
            || echo "# could not clone Megatron-LM $MEGATRON_TAG: its pretrain_gpt.py checks will skip" >&2
    fi
fi
[ -f "$MEGATRON_LM/pretrain_gpt.py" ] && echo "export MEGATRON_LM=$MEGATRON_LM"
exit 0
