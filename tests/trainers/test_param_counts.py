"""Model fidelity: every model preset each trainer exports, built on the meta device by the
trainer's own code from the exported file, has autoplan's parameter count (marker ``trainers``).

For each trainer the presets of ``model_db/`` are rendered as a small plan (8 GPUs, tp 1, pp 1,
ZeRO-1; ZeRO-3 for torchtitan, which has no ZeRO-1) at the preset's sequence length; a preset the
exporter or the rule table refuses is skipped with the refusal's words. One subprocess per trainer
(its environment, ``AUTOPLAN_<TRAINER>_PYTHON`` as in test_with_real_trainers.py) builds all of
them on the meta device and prints each one's count: the sum of ``numel`` over
``model.parameters()``, which yields a shared Parameter once, so tied embeddings count once, as in
autoplan's ``count_params(model).total`` (``lm_head`` 0 when tied).

* torchtitan 0.3.0: the module's ``autoplan_config()``, ``update_from_config`` and
  ``model_spec.model.build()`` under ``torch.device("meta")`` (what ``Trainer.__init__`` does).
* DeepSpeed 0.19.8 (tp = pp = 1: plain DeepSpeed around the Hugging Face model): the preset's
  config.json fields through ``AutoConfig.for_model`` and ``AutoModelForCausalLM.from_config``
  (transformers 5.22.2), as ``tests/trainers/deepspeed_train.py`` does, under the meta device.
* Megatron-LM core_v0.15.3 (``MEGATRON_LM``): ``parse_args`` + ``validate_args`` on the script's
  arguments, ``core_transformer_config_from_args`` and ``gpt_builders.gpt_builder`` (what
  ``pretrain_gpt.py`` builds) on a 1-rank gloo group after ``initialize_model_parallel()``. Without
  Transformer Engine: ``--transformer-impl local`` (``get_gpt_layer_local_spec`` /
  ``get_gpt_decoder_block_spec(use_transformer_engine=False)``) with ``use_cpu_initialization`` and
  no initialisation under the meta device; what it cannot build on a CPU is swapped for its
  parameter-free or same-shaped equivalent (see ``MEGATRON``).
* nanotron main @ 2411b022: ``build_model`` of ``LlamaForTraining`` / ``Qwen2ForTraining`` on the
  meta device (tp = pp = dp = 1, a fake 1-rank group) and the trainer's own
  ``mark_tied_parameters``; ``DistributedTrainer.init_model`` counts ``sum(p.numel())`` the same way.
* Megatron-Bridge 0.3.1: skipped (its recipe builds the model from the Hugging Face config it
  reads from the Hub, and ``import megatron.bridge`` needs Transformer Engine).

Conventions compared (each a separate count, so a difference says which part differs):
``params`` without the multi-token-prediction modules equals ``total``; the MTP modules a trainer
builds (Megatron ``--mtp-num-layers``, torchtitan deepseek_v3 ``num_mtp_layers``) equal autoplan's
``num_mtp_layers · mtp_per_depth`` (DeepSeek-V3: 11,610,068,224); DeepSeek-V3's expert bias
(``e_score_correction_bias``, Megatron's ``expert_bias``, torchtitan's ``expert_bias_E``) is a
buffer in every trainer (updated by a rule, not by gradients) and a parameter in autoplan's
router count (``router_per_layer`` + num_experts): the buffers of a model with ``router_bias`` are
added to the trainer's count (58 MoE layers · 256 = 14,848; + 256 in Megatron's MTP layer).
torchtitan's own MoE expert bias on models without one (Qwen3 MoE) is a buffer and not counted.
RoPE tables are buffers everywhere and not counted. Tolerance: exact.

Run: ``eval "$(bash tests/trainers/setup_envs.sh)"`` (the environments and ``MEGATRON_LM``), then
``pytest -m trainers tests/trainers/test_param_counts.py`` (about 1.5 min on 2 cores).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from autoplan.api import plan_from_record
from autoplan.cost.params import count_params
from autoplan.errors import AutoplanError
from autoplan.export import render
from autoplan.paths import data_dir
from autoplan.specs.models import load_model

pytestmark = pytest.mark.trainers
HERE = Path(__file__).resolve().parent


def _sibling(name: str):
    """A module of this folder by path (the suite imports with --import-mode=importlib)."""
    spec = importlib.util.spec_from_file_location(f"_autoplan_trainers_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REAL = _sibling("test_with_real_trainers")  # _python, _need, NANOTRON_ENV: one definition
MODEL_DB = data_dir("model_db")
PRESETS = sorted(path.stem for path in MODEL_DB.glob("*.yaml"))
GPUS, GBS_SEQS = 8, 8
# autoplan's own keys of a preset (the rest is the config.json a DeepSpeed script is given)
AUTOPLAN_KEYS = ("name", "aliases", "description", "sources", "seq_len")
EXPERT_BIAS = ("expert_bias", "expert_bias_E", "e_score_correction_bias")

# Appended to each check: one COUNT line per built model.
REPORT = '''
import json
def report(folder, model, mtp_prefix=None, **extra):
    """Parameters (named_parameters yields a shared, tied Parameter once) and expert-bias buffers,
    each split into the multi-token-prediction modules (names under mtp_prefix) and the rest."""
    def split(items):
        mtp = sum(t.numel() for name, t in items if mtp_prefix and name.startswith(mtp_prefix))
        return sum(t.numel() for _, t in items) - mtp, mtp
    params, mtp = split(list(model.named_parameters()))
    bias, bias_mtp = split([(k, b) for k, b in model.named_buffers() if k.endswith(%r)])
    line = {"folder": folder, "params": params, "mtp_params": mtp, "expert_bias": bias,
            "expert_bias_mtp": bias_mtp, "device": str(next(model.parameters()).device), **extra}
    print("COUNT " + json.dumps(line), flush=True)
def each(folders, build):
    """build(folder) for every folder; one that raises reports its error, the others still run."""
    import traceback
    for folder in folders:
        try:
            build(folder)
        except Exception:
            print("COUNT " + json.dumps({"folder": folder, "error": traceback.format_exc()[-3000:]}), flush=True)
''' % (EXPERT_BIAS,)

TORCHTITAN = REPORT + '''
import importlib, sys, torch
def build(folder):
    sys.path.insert(0, folder)
    sys.modules.pop("torchtitan_autoplan", None)
    cfg = importlib.import_module("torchtitan_autoplan").autoplan_config()
    sys.path.remove(folder)
    config = cfg.model_spec.model
    config.update_from_config(config=cfg)
    with torch.device("meta"):   # torchtitan/trainer.py Trainer.__init__: "build model (using meta init)"
        model = config.build()
    own, _ = config.get_nparams_and_flops(model, cfg.training.seq_len)   # the count torchtitan logs
    report(folder, model, "mtp_layers.", own=own)
each(sys.argv[1:], build)
'''

DEEPSPEED = REPORT + '''
import json, os, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
def build(folder):
    fields = json.load(open(os.path.join(folder, "config.json")))
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)   # deepspeed_train.py's
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    report(folder, model, architecture=type(model).__name__)
each(sys.argv[1:], build)
'''

# What megatron-core's local spec cannot build on a CPU, each swapped for an equivalent of the
# same parameters: the fused kernels' switches (persist_layer_norm, gradient_accumulation_fusion:
# apex extensions); LayerNorm1p (layernorm_zero_centered_gamma, Nemotron) as torch LayerNorm, the
# same weight and bias (zero-centred gamma changes the init and forward, not the shape); the
# alltoall dispatcher (makes a CUDA stream; dispatchers hold no parameters) as allgather;
# GroupedMLP (needs the grouped_gemm package) as SequentialMLP, the same weights per expert;
# MLA's core attention: core_v0.15.3's multi_latent_attention.py passes k_channels/v_channels,
# which only Transformer Engine's DotProductAttention takes (the local one holds no parameters);
# torch.cuda.current_device answers "meta", so what megatron-core puts on "the GPU" (YaRN's
# tables) goes to the meta device too.
MEGATRON = REPORT + REAL.ARGS_OF + '''
import os, sys, torch
sys.path.insert(0, os.environ["MEGATRON_LM"])
torch.cuda.get_device_capability = lambda *a: (9, 0)
torch.cuda.current_device = lambda: "meta"
import megatron.training.arguments as A
import megatron.core.transformer.transformer_config as T
A.get_device_arch_version = lambda: 9
T.is_te_min_version = lambda *a, **k: True
import torch.distributed as tdist
tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)   # in-process: no port
from megatron.core import parallel_state
parallel_state.initialize_model_parallel()
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.training.global_vars import set_args
from gpt_builders import gpt_builder
_attention_init = DotProductAttention.__init__
def _local_attention_init(self, *a, k_channels=None, v_channels=None, **k):
    _attention_init(self, *a, **k)
DotProductAttention.__init__ = _local_attention_init
def build(folder):
    words, _ = script_args(os.path.join(folder, "megatron_pretrain_gpt.sh"))
    sys.argv = ["pretrain_gpt.py", *words, "--data-path", "unused"]
    args = A.parse_args()
    args.world_size, args.rank = int(os.environ["AUTOPLAN_GPUS"]), 0
    A.validate_args(args)
    args.apply_rope_fusion, args.transformer_impl = False, "local"
    args.use_cpu_initialization, args.perform_initialization = True, False
    args.moe_grouped_gemm = False
    set_args(args)
    config = A.core_transformer_config_from_args(args)
    config.persist_layer_norm = config.gradient_accumulation_fusion = False
    config.layernorm_zero_centered_gamma = False
    config.moe_token_dispatcher_type = "allgather"
    config.moe_grouped_gemm = False
    with torch.device("meta"):
        model = gpt_builder(args, True, True, config=config)
    report(folder, model, "mtp.")
each(sys.argv[1:], build)
'''

# nanotron on one CPU rank: the stubs of test_with_real_trainers.py's NANOTRON_SPLIT (ParallelContext
# without a GPU, flash_attn's Triton layer norm, grouped_gemm.ops, P2P), and two more: flash-attn
# 2.8.3's RotaryEmbedding has no pos_idx_in_fp32 argument, which nanotron's FlashRotaryEmbedding
# (nn/rotary.py) passes (a buffer-only module: the argument is dropped); nanotron/nn/moe.py makes
# the router weight with device="cuda" and GroupedMLP's weights with torch.randn on the default
# device, both put on the meta device here; nanotron/trainer.py imports psutil (memory logging),
# which nanotron does not declare.
NANOTRON = REPORT + '''
import os, sys, types, torch
import torch.distributed as tdist
from torch.testing._internal.distributed.fake_pg import FakeStore
from nanotron.config import get_config_from_file
os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0")
tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
from nanotron.parallel import ParallelContext
ParallelContext.set_device = lambda self: None
context = ParallelContext(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1)
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(warp_size=32)
ops = types.ModuleType("grouped_gemm.ops")
def _no_kernel(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise RuntimeError(f"grouped_gemm.ops.{name}: no CUDA kernel in this check")
ops.__getattr__ = _no_kernel
sys.modules.update({"grouped_gemm": types.ModuleType("grouped_gemm"), "grouped_gemm.ops": ops})
sys.modules.setdefault("psutil", types.ModuleType("psutil"))
import flash_attn.layers.rotary as flash_rotary
_rotary_init = flash_rotary.RotaryEmbedding.__init__
def _rotary_init_2_8(self, dim, base=10000.0, interleaved=False, scale_base=None, pos_idx_in_fp32=True, device=None):
    _rotary_init(self, dim, base, interleaved, scale_base, device)
flash_rotary.RotaryEmbedding.__init__ = _rotary_init_2_8
_randn = torch.randn
torch.randn = lambda *a, device=None, **k: _randn(*a, device="meta" if device in (None, "cuda") else device, **k)
import nanotron.models.llama as llama, nanotron.models.qwen as qwen
from nanotron.models.base import build_model
from nanotron.random import RandomStates
from nanotron.trainer import mark_tied_parameters
for module in (llama, qwen):
    module.P2P = lambda pg, device: types.SimpleNamespace(pg=pg)
classes = {"LlamaConfig": llama.LlamaForTraining, "Qwen2Config": qwen.Qwen2ForTraining}   # trainer.py's
def build(folder):
    cfg = get_config_from_file(os.path.join(folder, "nanotron_config.yaml"))
    m = cfg.model.model_config
    model = build_model(lambda: classes[type(m).__name__](config=m, parallel_context=context,
                        parallel_config=cfg.parallelism, random_states=RandomStates({})),
                        context, dtype=torch.bfloat16, device=torch.device("meta"))
    mark_tied_parameters(model=model, parallel_context=context, parallel_config=cfg.parallelism)
    report(folder, model, model_class=type(m).__name__)
each(sys.argv[1:], build)
'''


# trainer -> (its check, a module its environment must import, extra environment)
CHECKS = {
    "torchtitan": (TORCHTITAN, "torchtitan", {"DATA_PATH": "/data/c4", "TOKENIZER": "/models/tokenizer"}),
    "deepspeed": (DEEPSPEED, "transformers", {}),
    "megatron": (MEGATRON, "megatron.core", {"AUTOPLAN_GPUS": str(GPUS)}),
    "nanotron": (NANOTRON, "nanotron.config", REAL.NANOTRON_ENV),
}
BRIDGE_SKIP = ("Megatron-Bridge 0.3.1 builds the model in its recipe's provider from the Hugging Face config "
               "it reads from the Hub (AutoBridge.from_hf_pretrained), and `import megatron.bridge` needs "
               "Transformer Engine (peft/lora_layers.py:20), which does not install on a CPU")


def _plan(trainer: str, model):
    """8 GPUs, tp 1, pp 1 (dp 8), one sequence per GPU; ZeRO-3 for torchtitan (FSDP2: it runs 0 or
    3), ZeRO-1 for the others (nanotron has no ZeRO-3)."""
    record = {"gpus": GPUS, "zero": 3 if trainer == "torchtitan" else 1, "mbs": 1, "seq_len": model.seq_len,
              "gbs_seqs": GBS_SEQS}
    return plan_from_record(record)


def _deepspeed_config(preset: str) -> str:
    """The preset's config.json (its Hugging Face fields): what plain DeepSpeed's training script
    is given as MODEL_CONFIG; the JSON it exports holds no model."""
    import yaml

    fields = yaml.safe_load((MODEL_DB / f"{preset}.yaml").read_text())
    return json.dumps({k: v for k, v in fields.items() if k not in AUTOPLAN_KEYS})


def _export_all(trainer: str, root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Each preset's export in a folder of ``root``, or the exporter's (rules') refusal."""
    folders, refused = {}, {}
    for preset in PRESETS:
        model = load_model(preset)
        layout, training = _plan(trainer, model)
        try:
            result = render(trainer, model, layout, training)
        except AutoplanError as exc:
            refused[preset] = str(exc)
            continue
        folder = root / preset
        folder.mkdir()
        for name, text in result.files.items():
            (folder / name).write_text(text)
        if trainer == "deepspeed":
            (folder / "config.json").write_text(_deepspeed_config(preset))
        folders[preset] = folder
    return folders, refused


def _count_all(trainer: str, root: Path) -> dict[str, dict | str]:
    """preset -> the trainer's COUNT line, or the refusal (a string); one subprocess for all."""
    code, module, env = CHECKS[trainer]
    if trainer == "megatron":
        root_lm = os.environ.get("MEGATRON_LM", "")
        if not (Path(root_lm) / "gpt_builders.py").exists():
            pytest.skip("set MEGATRON_LM to a Megatron-LM core_v0.15.3 checkout (setup_envs.sh clones one)")
        env = {**env, "MEGATRON_LM": root_lm}
    REAL._need(module, trainer, env)
    folders, refused = _export_all(trainer, root)
    done = subprocess.run([REAL._python(trainer), "-c", code, *map(str, folders.values())], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env}, check=False)
    lines = [json.loads(line[len("COUNT "):]) for line in done.stdout.splitlines() if line.startswith("COUNT ")]
    assert done.returncode == 0 and len(lines) == len(folders), done.stdout[-3000:] + done.stderr[-5000:]
    by_folder = {line["folder"]: line for line in lines}
    return {**refused, **{preset: by_folder[str(folder)] for preset, folder in folders.items()}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """trainer -> its counts, built once per module: a skip or a failed check is kept and raised
    again for each of its presets (not one more subprocess per preset)."""
    cache: dict[str, dict | tuple] = {}

    def counts(trainer: str) -> dict[str, dict | str]:
        if trainer not in cache:
            try:
                cache[trainer] = _count_all(trainer, tmp_path_factory.mktemp(trainer))
            except pytest.skip.Exception as exc:
                cache[trainer] = (pytest.skip, str(exc.msg))
            except (AssertionError, subprocess.TimeoutExpired) as exc:
                cache[trainer] = (pytest.fail, f"the {trainer} check failed: {exc}")
        if isinstance(cache[trainer], tuple):
            outcome, message = cache[trainer]
            outcome(message)
        return cache[trainer]

    return counts


def _mtp_params(model) -> int:
    """autoplan's MTP parameters (not part of ``total``): num_mtp_layers · mtp_per_depth."""
    pc = count_params(model)
    return pc.num_mtp_layers * pc.mtp_per_depth


# No known differences are left: the two this test found (nanotron's Qwen2Config has no q/k
# RMSNorms, 9,216 parameters fewer for Qwen3 8B; transformers' DeepseekV3ForCausalLM builds no MTP
# module, 11,610,068,224 fewer) are refused by those exporters (export.architecture_problem), so
# the pairs skip with the refusal.


@pytest.mark.parametrize("trainer", [*CHECKS, "megatron-bridge"])
@pytest.mark.parametrize("preset", PRESETS)
def test_trainer_builds_autoplan_parameter_count(preset, trainer, built):
    if trainer == "megatron-bridge":
        pytest.skip(BRIDGE_SKIP)
    got = built(trainer)[preset]
    if isinstance(got, str):
        pytest.skip(f"the {trainer} export refuses {preset}: {got}")
    assert "error" not in got, got["error"]
    assert got["device"] == "meta", got
    if "own" in got:  # torchtitan logs get_nparams_and_flops' count: the same sum
        assert got["own"] == got["params"] + got["mtp_params"], got
    model = load_model(preset)
    bias = model.moe is not None and model.moe.router_bias   # a parameter in autoplan, a buffer in the trainers
    params = got["params"] + (got["expert_bias"] if bias else 0)
    mtp = got["mtp_params"] + (got["expert_bias_mtp"] if bias else 0)
    ours = (count_params(model).total, _mtp_params(model))
    difference = (params - ours[0], mtp - ours[1])
    shown = f"{trainer} {params:,} + MTP {mtp:,}, autoplan {ours[0]:,} + MTP {ours[1]:,}"
    assert difference == (0, 0), shown
