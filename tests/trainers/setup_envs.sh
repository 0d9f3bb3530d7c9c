#!/usr/bin/env bash
# One cached virtual environment per trainer for `pytest -m trainers` (docs/export.md).
# megatron-core 0.15.3 pins numpy < 2 while torchtitan 0.3.0 needs numpy 2, so one environment
# cannot hold both. Prints the exports to paste (or eval):
#   eval "$(bash tests/trainers/setup_envs.sh)" && pytest -m trainers tests/trainers
# Environments live in $AUTOPLAN_TRAINER_ENVS (default ~/.cache/autoplan-trainer-envs); a
# trainer whose environment holds the packages below is not installed again; one whose list changed
# gets the new packages installed into it (delete its folder to redo it from scratch).
# Megatron-LM's own pretrain_gpt.py checks need a checkout at tag core_v0.15.3 (and one at each of
# MEGATRON_LATER_TAGS): give it as MEGATRON_LM (MEGATRON_LM_CORE_V0_16_0), or the script clones
# it into the cache from MEGATRON_LM_GIT (default github.com).
set -euo pipefail
CACHE="${AUTOPLAN_TRAINER_ENVS:-$HOME/.cache/autoplan-trainer-envs}"
# The CPU wheel of torch 2.13.0 is the torch these checks run on (none needs a GPU); another
# torch would be a multi-GB download.
TORCH="torch==2.13.0"
MEGATRON_TAG="core_v0.15.3"
# Later tags a golden plan targets (cases.yaml trainer_version; core_v0.16.0 adds --optimizer muon):
# their pretrain_gpt.py checks run the checkout's own megatron/core (a namespace package that
# comes before the installed megatron-core on sys.path) in the megatron environment.
MEGATRON_LATER_TAGS=(core_v0.16.0)
# Where the checkouts are cloned from (a mirror, or a local clone, where github.com is not reachable).
MEGATRON_LM_GIT="${MEGATRON_LM_GIT:-https://github.com/NVIDIA/Megatron-LM}"
# What each check imports (tests/trainers/test_with_real_trainers.py), pinned:
# * megatron: megatron-core's TransformerConfig and micro-batch calculator; Megatron-LM's
#   arguments.py and tokenizer modules import six and regex at parse time; core_v0.16.0's
#   megatron/training/__init__.py imports triton (initialize.py -> transformer/custom_layers/
#   batch_invariant_kernels.py) and pydantic (training.py -> megatron/rl/__init__.py).
# * torchtitan 0.3.0: its own requirements (spmd_types, tyro, datasets, ...) and triton, which
#   it does not declare but imports whenever a model module loads (models/common/token_dispatcher.py
#   -> distributed/minimal_async_ep/kernels.py `import triton`); on a CPU it only imports, its
#   @triton.jit kernels compile on first GPU use. 3.8.0 is the wheel on this machine's index.
#   torchao 0.18.0 for the Float8 converter of FP8 plans (its CUDA extensions do not load on a
#   CPU: a warning; the config check stubs the SM89 capability test to the plans' H100).
# * deepspeed 0.19.8: DeepSpeedConfig (its own requirements); transformers 5.22.2 for the CPU
#   training runs (tests/trainers/deepspeed_train.py builds the Hugging Face model; AutoEP's
#   mixtral/qwen3_moe presets need transformers >= 5.0.0, auto_ep_presets/*.py).
# * nanotron main @ 2411b022 (no release holds it: PyPI's 0.4 is 2024's code): installed from a
#   checkout (NANOTRON, or cloned into the cache) with --no-deps and its pyproject's requirements
#   (numpy<2; pyarrow 24.0.0, the newest that runs on numpy 1, as datasets 5.2.0 needs) plus what
#   its config module imports without declaring it: transformers (config.py `AutoTokenizer`) and
#   flash_attn (config/models_config.py -> nn/attention.py -> nn/ring_attention.py, at import).
#   flash-attn 2.8.3 is built without its CUDA extension (FLASH_ATTENTION_SKIP_CUDA_BUILD) and the
#   tests import it through its own Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE, needs
#   triton and einops); nanotron's config loader runs no kernel.
# * megatron-bridge 0.3.1 (PyPI; commit 9c9dd84896) with the megatron-core it ships,
#   0.16.1 (its 3rdparty/Megatron-LM submodule, tag core_v0.16.1), --no-deps: the wheel requires
#   transformer-engine (CUDA builds), mamba-ssm, causal-conv1d and nvidia-resiliency-ext, none of
#   which installs on a CPU; the pure-python requirements its config path reads are pinned.
#   Without Transformer Engine nothing of megatron.bridge imports (megatron/bridge/__init__.py ->
#   ... -> peft/lora_layers.py `import transformer_engine.pytorch`): the loader checks put an import
#   stub first on the path (tests/trainers/stubs/transformer_engine; no TE kernel runs in the config
#   code). What `from megatron.bridge import recipes` imports beyond that is pinned here: triton
#   (megatron/core/inference), datasets with a huggingface-hub that transformers 4.57 accepts
#   (< 1.0) and the fsspec datasets 4.4 accepts, accelerate, and megatron-energon (data/energon).
declare -A PACKAGES=(
    [megatron]="numpy<2 megatron-core==0.15.3 einops==0.8.1 pyyaml packaging six==1.17.0 regex triton==3.8.0 pydantic==2.14.4"
    [torchtitan]="torchtitan==0.3.0 triton==3.8.0 torchao==0.18.0"
    [deepspeed]="deepspeed==0.19.8 transformers==5.22.2"
    [nanotron]="numpy==1.26.4 pyyaml==6.0.4 packaging==26.4 safetensors==0.8.0 dacite==1.9.2 tqdm==4.70.1 datasets==5.2.0 pyarrow==24.0.0 torchtyping==0.1.5 transformers==5.24.0 triton==3.8.0 einops==0.8.1"
    [megatron-bridge]="megatron-core==0.16.1 numpy==2.4.6 omegaconf==2.3.1 hydra-core==1.3.2 transformers==4.57.6 einops==0.8.2 six==1.17.0 regex==2026.11.19 pyyaml==6.0.4 tqdm==4.70.1 rich==15.0.0 typing-extensions==4.16.0 triton==3.8.0 datasets==4.4.1 huggingface-hub==0.36.2 fsspec==2025.10.0 s3fs==2025.10.0 accelerate==1.16.0 megatron-energon==7.4.1"
)
# Installed after PACKAGES, without their declared requirements (see above).
NANOTRON_COMMIT="2411b022a75fb7f7561a1bb4166706da5e1b76de"
declare -A NO_DEPS=(
    [nanotron]="flash-attn==2.8.3 nanotron@$NANOTRON_COMMIT"
    [megatron-bridge]="megatron-bridge==0.3.1"
)
# Arguments name the trainers to set up (default: all of them), e.g. `bash setup_envs.sh nanotron`.
TRAINERS=("$@")
[ ${#TRAINERS[@]} -gt 0 ] || TRAINERS=(megatron torchtitan deepspeed nanotron megatron-bridge)
if [ -z "${NANOTRON:-}" ] && [[ " ${TRAINERS[*]} " == *" nanotron "* ]]; then
    NANOTRON="$CACHE/nanotron-${NANOTRON_COMMIT:0:8}"
    if [ ! -f "$NANOTRON/src/nanotron/config/config.py" ]; then
        { git init -q "$NANOTRON" && git -C "$NANOTRON" fetch -q --depth 1 https://github.com/huggingface/nanotron "$NANOTRON_COMMIT" \
            && git -C "$NANOTRON" checkout -q FETCH_HEAD; } >&2 \
            || echo "# could not fetch nanotron $NANOTRON_COMMIT: its checks will skip" >&2
    fi
fi
no_deps() {  # the NO_DEPS of trainer $1 into python $2
    local package
    for package in ${NO_DEPS[$1]:-}; do
        case "$package" in
            flash-attn==*)  # the Python package only; its CUDA kernels are not built (see above)
                FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE \
                    "$2" -m pip install -q --no-deps --no-build-isolation "$package" >&2 ;;
            nanotron@*)
                [ -f "$NANOTRON/src/nanotron/config/config.py" ] || return 1
                [ "$(git -C "$NANOTRON" rev-parse HEAD)" = "$NANOTRON_COMMIT" ] \
                    || echo "# NANOTRON=$NANOTRON is not at $NANOTRON_COMMIT" >&2
                "$2" -m pip install -q --no-deps "$NANOTRON" >&2 ;;
            *) "$2" -m pip install -q --no-deps "$package" >&2 ;;
        esac
    done
}
for trainer in "${TRAINERS[@]}"; do
    [ -n "${PACKAGES[$trainer]:-}" ] || { echo "unknown trainer '$trainer' (one of: ${!PACKAGES[*]})" >&2; exit 2; }
    env="$CACHE/$trainer"
    want="$TORCH ${PACKAGES[$trainer]}${NO_DEPS[$trainer]:+ ${NO_DEPS[$trainer]}}"
    if [ "$(cat "$env/.installed" 2>/dev/null)" != "$want" ]; then  # (.installed is written last)
        [ -x "$env/bin/python" ] || python3 -m venv --clear "$env" >&2
        # shellcheck disable=SC2086
        "$env/bin/python" -m pip install -q $TORCH ${PACKAGES[$trainer]} >&2
        if no_deps "$trainer" "$env/bin/python"; then
            echo "$want" > "$env/.installed"
        else
            echo "# $trainer: no checkout to install from: its checks will skip" >&2
        fi
    fi
    name="${trainer^^}"
    echo "export AUTOPLAN_${name//-/_}_PYTHON=$env/bin/python"
done
if [[ " ${TRAINERS[*]} " != *" megatron "* ]]; then
    exit 0
fi
clone_megatron_lm() {  # tag $1 into $2 from $MEGATRON_LM_GIT
    [ -f "$2/pretrain_gpt.py" ] && return 0
    git -c advice.detachedHead=false clone -q --depth 1 --branch "$1" "$MEGATRON_LM_GIT" "$2" >&2 \
        || echo "# could not clone Megatron-LM $1 from $MEGATRON_LM_GIT: its pretrain_gpt.py checks will skip" >&2
}
[ -n "${MEGATRON_LM:-}" ] || { MEGATRON_LM="$CACHE/Megatron-LM-$MEGATRON_TAG"; clone_megatron_lm "$MEGATRON_TAG" "$MEGATRON_LM"; }
[ -f "$MEGATRON_LM/pretrain_gpt.py" ] && echo "export MEGATRON_LM=$MEGATRON_LM"
for tag in "${MEGATRON_LATER_TAGS[@]}"; do  # MEGATRON_LM_CORE_V0_16_0=... for the plans pinned to it
    name="MEGATRON_LM_${tag^^}"
    name="${name//./_}"
    path="${!name:-$CACHE/Megatron-LM-$tag}"
    [ -n "${!name:-}" ] || clone_megatron_lm "$tag" "$path"
    [ -f "$path/pretrain_gpt.py" ] && echo "export $name=$path"
done
exit 0
