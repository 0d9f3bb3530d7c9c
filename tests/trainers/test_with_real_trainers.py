"""The exported files, read by the trainers' own code on CPU (optional; marker ``trainers``).

Skipped unless the packages import; install them as docs/export.md says, one virtual environment
per trainer (``tests/trainers/setup_envs.sh``: megatron-core 0.15.3 pins numpy < 2, torchtitan
needs numpy 2), named by ``AUTOPLAN_<TRAINER>_PYTHON`` (default: this interpreter). Each check
runs in a subprocess of that interpreter (one process group per process, and Megatron-LM's
checkout must not shadow the installed megatron-core):

* DeepSpeed 0.19.8: ``DeepSpeedConfig`` on a fake process group of the plan's world size, with an
  ``mpu`` giving the plan's data-parallel size (its batch assertion is the trainer's own).
* torchtitan 0.3.0: the exported module's ``autoplan_config()`` (Trainer.Config validation),
  the model's ``update_from_config`` and ``ParallelDims.build_mesh()`` on a fake process group.
* megatron-core 0.15.3: ``TransformerConfig`` and the micro-batch calculator from the script's flags.
* Megatron-LM core_v0.15.3 (``MEGATRON_LM`` = a checkout; a plan pinned to another tag,
  ``MEGATRON_LM_CORE_V0_16_0``): ``parse_args`` + ``validate_args`` +
  ``core_transformer_config_from_args`` on the script's arguments (GPU capability stubbed to
  Hopper; Transformer Engine kernel switches off).
* The pipeline split of every trainer (``_assert_split``): the decoder layers each rank and chunk
  builds, by the trainer's own split function, equal those autoplan costs.
* nanotron main @ 2411b022: ``get_config_from_file`` (what ``run_train.py`` loads) on the YAML,
  its parallelism, batch and model fields read back.
* Megatron-Bridge 0.3.1: the recipe with ``process_config_with_overrides`` (YAML and Hydra words;
  ``import megatron.bridge`` needs Transformer Engine, a CUDA build: an import stub stands in,
  ``stubs/transformer_engine``, and the recipe's config.json is the preset's, offline);
  Hydra/OmegaConf (its parsers) on the script's words; megatron-core 0.16.1 (its core) on the
  model, ddp and optimizer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.cost.stages import compute_cost_rank_layers, rank_chunk_layers, trainer_stage_layers
from autoplan.export import LaunchOptions, render
from autoplan.layout import PP_SPLITS
from autoplan.profiles import load_profile
from autoplan.specs.models import load_model

pytestmark = pytest.mark.trainers
HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "golden" / "export"
MODEL_DB = HERE.parents[1] / "model_db"
PRESET_KEYS = ("name", "aliases", "description", "sources", "seq_len")  # autoplan's, beside a config.json's
CASES = yaml.safe_load((GOLDEN / "cases.yaml").read_text())["cases"]


def _cases(trainer):
    return [pytest.param(c, id=c["name"]) for c in CASES if trainer in c["trainers"]]


def _python(trainer: str) -> str:
    """The interpreter of ``trainer``'s environment (AUTOPLAN_<TRAINER>_PYTHON with '-' as '_',
    else this one)."""
    return os.environ.get(f"AUTOPLAN_{trainer.upper().replace('-', '_')}_PYTHON", sys.executable)


def _need(module, trainer, env=None):
    """Skip unless ``module`` imports in ``trainer``'s interpreter (an import that fails, e.g. on
    a numpy ABI clash, skips rather than fails, naming the import that failed)."""
    python = _python(trainer)
    if python == sys.executable and importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"{module} is not installed (see docs/export.md)")
    done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **(env or {})})
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        where = [line.strip() for line in lines if line.strip().startswith("File ")][-1:]
        pytest.skip(f"{module} does not import in {python}: {where + lines[-1:]}")


def _model(case):
    name = case["model"]
    return load_model(GOLDEN / name if name.endswith(".json") else name)


def _export(case, trainer, folder: Path, launch: LaunchOptions | None = None):
    layout, training = plan_from_record(case["layout"])
    result = render(trainer, _model(case), layout, training, launch,
                    trainer_version=case.get("trainer_version", {}).get(trainer))  # e.g. muon: core_v0.16.0
    for name, text in result.files.items():
        (folder / name).write_text(text)
    return layout


def _split_line(out: str) -> list[list[int]]:
    """The ``SPLIT [[...], ...]`` line a check prints: layers per (pipeline rank, model chunk)."""
    return json.loads(next(line for line in out.splitlines() if line.startswith("SPLIT "))[len("SPLIT "):])


def _assert_split(trainer: str, case, lay, trainer_split: list[list[int]]) -> None:
    """The trainer's own split (decoder layers per rank and chunk) equals the one autoplan costs
    for ``trainer``: its profile's ``trainer_stage_layers``, whose first and last ranks (and
    chunks) are those of the split functions checked here (``rank_chunk_layers``, nanotron's
    ``compute_cost_rank_layers``); MTP blocks are not decoder layers and are left out."""
    model = _model(case)
    profile = load_profile(trainer)
    pp, vpp = np.array([float(lay.pp)]), np.array([float(lay.vpp)])
    pp_split = np.array([PP_SPLITS.index(lay.pp_split)])
    if profile.pipeline.split_rule == "compute_cost" and not model.num_mtp_layers and model.mla is None:
        ours = [[int(n)] for n in compute_cost_rank_layers(model, pp)[: lay.pp, 0]]
    else:
        chunks = rank_chunk_layers(model.num_layers, pp, vpp, pp_split == 1, np.arange(lay.pp, dtype=float)[:, None])
        ours = [[int(n) for n in chunks[: lay.vpp, rank, 0]] for rank in range(lay.pp)]
    assert trainer_split == ours, (trainer_split, ours)
    costed = trainer_stage_layers(model, profile.pipeline.split_rule, pp, vpp, pp_split)
    mtp = model.num_mtp_layers
    assert (costed.first[0], costed.last[0] - mtp) == (sum(trainer_split[0]), sum(trainer_split[-1]))


def _check(code: str, *args, env=None, trainer=""):
    done = subprocess.run([_python(trainer), "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


ARGS_OF = '''
import shlex
def script_args(path):
    text = open(path).read()
    words = shlex.split(text.split("ARGS=(\\n", 1)[1].split("\\n)\\n", 1)[0])
    return [w for w in words if w != "$DATA_PATH"], text
'''

DEEPSPEED = '''
import json, sys
import torch.distributed as tdist
from torch.testing._internal.distributed.fake_pg import FakeStore
path, gpus, dp, mbs, acc, gbs, zero = sys.argv[1], *map(int, sys.argv[2:])
tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=gpus)
import deepspeed.comm as dist
dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
from deepspeed.runtime.config import DeepSpeedConfig
class MPU:
    def get_data_parallel_world_size(self):
        return dp
cfg = DeepSpeedConfig(json.load(open(path)), mpu=MPU())
assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps) == (gbs, mbs, acc)
assert cfg.zero_optimization_stage == zero
autoep = json.load(open(path)).get("expert_parallel")
if autoep:  # AutoEP, parsed by DeepSpeed's own parse_autoep_config
    assert cfg.expert_parallel_config.enabled and cfg.expert_parallel_config.autoep_size == autoep["autoep_size"]
'''


@pytest.mark.parametrize("case", _cases("deepspeed"))
def test_deepspeed_accepts_the_config(case, tmp_path):
    _need("deepspeed", "deepspeed")
    lay = _export(case, "deepspeed", tmp_path)
    _check(DEEPSPEED, tmp_path / "deepspeed_config.json", case["layout"]["gpus"], lay.dp, lay.mbs, lay.grad_acc,
           lay.gbs_seqs, lay.zero, trainer="deepspeed")


# Megatron-DeepSpeed (the DeepSpeed export with pp > 1) builds GPTModelPipe, a DeepSpeed
# PipelineModule over these layer specs in this order with partition_method='type:transformer'
# (deepspeedai/Megatron-DeepSpeed @ 4efb479d megatron/model/gpt_model.py, GPTModelPipe.__init__):
# the embedding, the decoder layers, the MoE loss (a function, MoE models only), the final norm,
# the head (LMHeadPipe untied, else the tied embedding) and the fp32 cast (bf16).
DEEPSPEED_SPLIT = '''
import json, sys, types, torch
from torch import nn
from deepspeed.runtime.pipe.module import LayerSpec, PipelineModule, TiedLayerSpec
pp, num_layers, moe, rmsnorm, tied = map(int, sys.argv[1:6])
kind = lambda name: type(name, (nn.Module,), {})   # the spec's class name is all the method reads
def _calculate_moe_loss(x): return x
def float16_to_fp32(x): return x
specs = [TiedLayerSpec("embed", kind("EmbeddingPipe")),
         *[LayerSpec(kind("ParallelTransformerLayerPipe")) for _ in range(num_layers)],
         *([_calculate_moe_loss] if moe else []), LayerSpec(kind("RMSNorm" if rmsnorm else "LayerNorm")),
         TiedLayerSpec("embed", kind("EmbeddingPipe")) if tied else LayerSpec(kind("LMHeadPipe")), float16_to_fp32]
# DeepSpeed's own _partition_layers (runtime/pipe/module.py) on a module holding only what it reads
module = PipelineModule.__new__(PipelineModule)
nn.Module.__init__(module)
module._layer_specs, module.num_stages, module.global_rank, module.loss_fn = specs, pp, 1, None
module._topo = types.SimpleNamespace(get_coord=lambda rank: types.SimpleNamespace(pipe=0))
module._partition_layers(method="type:transformer")
parts = module.parts
split = [[sum(isinstance(s, LayerSpec) and s.typename.__name__ == "ParallelTransformerLayerPipe"
              for s in specs[parts[stage]:parts[stage + 1]])] for stage in range(pp)]
print("SPLIT", json.dumps(split))
'''


@pytest.mark.parametrize("case", [c for c in _cases("deepspeed") if c.values[0]["layout"].get("pp", 1) > 1])
def test_megatron_deepspeed_partitions_the_stages_autoplan_costs(case, tmp_path):
    """DeepSpeed 0.19.8's PipelineModule partition ('type:transformer', Megatron-DeepSpeed's
    GPTModelPipe) gives each stage the decoder layers autoplan costs (plans with pp > 1: with
    pp 1 the export is plain DeepSpeed, which has no pipeline)."""
    _need("deepspeed", "deepspeed")
    lay = _export(case, "deepspeed", tmp_path)
    model = _model(case)
    out = _check(DEEPSPEED_SPLIT, lay.pp, model.num_layers, int(model.moe is not None),
                 int(model.norm == "rmsnorm"), int(model.tied_embeddings), trainer="deepspeed")
    _assert_split("deepspeed", case, lay, _split_line(out))


TORCHTITAN = '''
import importlib, sys
folder, gpus, eps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sys.path.insert(0, folder)
# Float8LinearConverter refuses a GPU below SM89 (components/quantization/float8.py
# has_cuda_capability(8, 9)): the plans' H100 (SM90), as the Megatron checks stub Hopper
import torchtitan.components.quantization.float8 as F8
F8.has_cuda_capability = lambda major, minor: (9, 0) >= (major, minor)
cfg = importlib.import_module("torchtitan_autoplan").autoplan_config()
cfg.model_spec.model.update_from_config(config=cfg)
import dataclasses
from torchtitan.models.common import RMSNorm
def norms(config):
    if isinstance(config, RMSNorm.Config):
        yield config
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        for f in dataclasses.fields(config):
            yield from norms(getattr(config, f.name))
    elif isinstance(config, (list, tuple)):
        for item in config:
            yield from norms(item)
found = {n.eps for n in norms(cfg.model_spec.model)}
assert found == {eps}, (found, eps)  # the model's norm eps on every norm of the flavor
import torch.distributed as tdist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchtitan.distributed import ParallelDims
tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=gpus)
p = cfg.parallelism
dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                    cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                    ep=p.expert_parallel_degree, world_size=gpus)
dims.build_mesh()
'''


@pytest.mark.parametrize("case", _cases("torchtitan"))
def test_torchtitan_builds_the_config_and_mesh(case, tmp_path):
    _need("torchtitan", "torchtitan")
    _export(case, "torchtitan", tmp_path)
    paths = {"DATA_PATH": "/data/c4", "TOKENIZER": "/models/tokenizer"}  # read, not opened, by the config
    _check(TORCHTITAN, tmp_path, case["layout"]["gpus"], _model(case).norm_eps, env=paths, trainer="torchtitan")


TORCHTITAN_SPLIT = '''
import importlib, json, sys
import torch.distributed as tdist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchtitan.distributed import ParallelDims
from torchtitan.distributed import pipeline_parallel as P
folder, gpus = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, folder)
cfg = importlib.import_module("torchtitan_autoplan").autoplan_config()
cfg.model_spec.model.update_from_config(config=cfg)
tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=gpus)
p = cfg.parallelism
dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                    cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                    ep=p.expert_parallel_degree, world_size=gpus)
# what pipeline_llm does (distributed/pipeline_parallel.py): the virtual stages, each one's module
# names, and the stages each rank runs under the schedule's style (loop or V)
stages, layers, first, last = P._get_pipeline_metadata(dims, p, cfg.model_spec.model)
names = P._generate_llm_fqn_per_model_part(stages, layers, first, last)
count = [sum(name.startswith("layers.") for name in part) for part in names]
split = [[count[s] for s in P._get_pp_rank_to_stage_indices_mapping(rank, dims.pp, p.pipeline_parallel_schedule, stages)]
         for rank in range(dims.pp)]
print("SPLIT", json.dumps(split))
'''


@pytest.mark.parametrize("case", [c for c in _cases("torchtitan") if c.values[0]["layout"].get("pp", 1) > 1])
def test_torchtitan_splits_the_stages_autoplan_costs(case, tmp_path):
    """torchtitan 0.3.0's own pipeline split (``_get_pipeline_metadata``,
    ``_generate_llm_fqn_per_model_part``, ``_get_pp_rank_to_stage_indices_mapping``) gives each
    rank the decoder layers autoplan costs (the plans with pp > 1: with pp 1 torchtitan calls no
    pipeline code and every rank holds the whole model)."""
    _need("torchtitan", "torchtitan")
    lay = _export(case, "torchtitan", tmp_path)
    paths = {"DATA_PATH": "/data/c4", "TOKENIZER": "/models/tokenizer"}
    out = _check(TORCHTITAN_SPLIT, tmp_path, case["layout"]["gpus"], env=paths, trainer="torchtitan")
    _assert_split("torchtitan", case, lay, _split_line(out))


# Appended to a check that built megatron-core's TransformerConfig as ``config``: the decoder
# layers each (rank, chunk) builds, by megatron-core's own get_num_layers_to_build
# (transformer_block.py; the --pipeline-model-parallel-layout's count where one is given).
MEGATRON_SPLIT = '''
import json
from megatron.core import parallel_state as ps
from megatron.core.transformer.transformer_block import get_num_layers_to_build
pp, vpp = config.pipeline_model_parallel_size, config.virtual_pipeline_model_parallel_size or 1
ps.set_virtual_pipeline_model_parallel_world_size(vpp if vpp > 1 else None)
split = []
for rank in range(pp):
    ps.set_pipeline_model_parallel_rank(rank)
    split.append([get_num_layers_to_build(config, vp_stage=k if vpp > 1 else None, pp_rank=rank) for k in range(vpp)])
print("SPLIT", json.dumps(split))
'''


MEGATRON_CORE = ARGS_OF + '''
import sys, torch
from megatron.core.transformer import TransformerConfig
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
words, text = script_args(sys.argv[1])
gpus, grad_acc = int(sys.argv[2]), int(sys.argv[3])
f = {}
for i, w in enumerate(words):
    if w.startswith("--"):
        nxt = words[i + 1] if i + 1 < len(words) else None
        f[w] = None if nxt is None or nxt.startswith("--") else nxt
i = lambda k, d=None: int(f[k]) if k in f else d
tp, pp, cp = i("--tensor-model-parallel-size"), i("--pipeline-model-parallel-size"), i("--context-parallel-size")
layers = i("--num-layers")
vpp = layers // pp // i("--num-layers-per-virtual-pipeline-stage") if "--num-layers-per-virtual-pipeline-stage" in f else None
rc = f.get("--recompute-granularity")
TransformerConfig(
    num_layers=layers, hidden_size=i("--hidden-size"), num_attention_heads=i("--num-attention-heads"),
    num_query_groups=i("--num-query-groups"), ffn_hidden_size=i("--ffn-hidden-size"), kv_channels=i("--kv-channels"),
    tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
    context_parallel_size=cp, expert_model_parallel_size=i("--expert-model-parallel-size", 1),
    expert_tensor_parallel_size=i("--expert-tensor-parallel-size"), sequence_parallel="--sequence-parallel" in f,
    num_moe_experts=i("--num-experts"), moe_router_topk=i("--moe-router-topk", 2),
    moe_ffn_hidden_size=i("--moe-ffn-hidden-size"), recompute_granularity=rc,
    recompute_method=f.get("--recompute-method"), recompute_num_layers=i("--recompute-num-layers"),
    gated_linear_unit="--swiglu" in f, normalization=f["--normalization"],
    add_bias_linear="--disable-bias-linear" not in f, qk_layernorm="--qk-layernorm" in f,
    bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, apply_rope_fusion=False)
dp = gpus // (tp * pp * cp)
calc = ConstantNumMicroBatchesCalculator(i("--global-batch-size"), i("--micro-batch-size"), dp, False, 0)
assert calc.get() == grad_acc, (calc.get(), grad_acc)
'''


@pytest.mark.parametrize("case", _cases("megatron"))
def test_megatron_core_accepts_the_shape_and_batch(case, tmp_path):
    _need("megatron.core", "megatron")
    lay = _export(case, "megatron", tmp_path)
    # TransformerConfig.__post_init__ asks Transformer Engine's version for an FP8 MoE: the stub's
    _check(MEGATRON_CORE, tmp_path / "megatron_pretrain_gpt.sh", case["layout"]["gpus"], lay.grad_acc,
           trainer="megatron", env=_te_stub_env())


MEGATRON_LM = ARGS_OF + '''
import json, os, sys
words, text = script_args(sys.argv[1])
gpus, want = int(sys.argv[2]), json.loads(sys.argv[3])
sys.path.insert(0, os.environ["MEGATRON_LM"])
if "CUDA_DEVICE_MAX_CONNECTIONS=1" in text:
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
else:
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
import torch
torch.cuda.get_device_capability = lambda *a: (9, 0)       # Hopper, for the grouped-GEMM check
import megatron.training.arguments as A
import megatron.core.transformer.transformer_config as T
A.get_device_arch_version = lambda: 9
T.is_te_min_version = lambda *a, **k: True                 # no Transformer Engine on CPU
sys.argv = ["pretrain_gpt.py", *words, "--data-path", "unused"] if "--mock-data" not in words else ["pretrain_gpt.py", *words]
args = A.parse_args()
args.world_size, args.rank = gpus, 0
A.validate_args(args)
args.apply_rope_fusion = False
config = A.core_transformer_config_from_args(args)
# core_v0.16.0 builds the model flags from TransformerConfig's fields: --norm-epsilon fills
# layernorm_epsilon (megatron/core/transformer/transformer_config.py argparse_meta)
DEST = {"norm_epsilon": "layernorm_epsilon"}
got = {k: getattr(args, k) if hasattr(args, k) else getattr(args, DEST[k]) for k in want}
assert got == want, (got, want)
''' + MEGATRON_SPLIT


@pytest.mark.parametrize("case", _cases("megatron"))
def test_megatron_lm_parses_and_validates_the_arguments(case, tmp_path):
    version = case.get("trainer_version", {}).get("megatron")  # None: the pinned core_v0.15.3
    variable = f"MEGATRON_LM_{version.upper().replace('.', '_')}" if version else "MEGATRON_LM"
    root = os.environ.get(variable, "")
    if not (Path(root) / "megatron" / "training" / "arguments.py").exists():
        pytest.skip(f"set {variable} to a Megatron-LM {version or 'core_v0.15.3'} checkout (setup_envs.sh clones one)")
    _need("torch", "megatron")
    lay = _export(case, "megatron", tmp_path, LaunchOptions(checkpoint_dir="/ckpt/run"))
    model, (_, training) = _model(case), plan_from_record(case["layout"])
    # what the plan and the model say, read back from Megatron's own parsed args; the overlap
    # flags follow the megatron profile (dp_overlap 0.9, fsdp_overlap 0.8: both > 0)
    want = {"world_size": case["layout"]["gpus"], "tensor_model_parallel_size": lay.tp,
            "pipeline_model_parallel_size": lay.pp, "context_parallel_size": lay.cp,
            "expert_model_parallel_size": lay.ep, "sequence_parallel": lay.sp and lay.tp > 1,
            "micro_batch_size": lay.mbs, "global_batch_size": lay.gbs_seqs, "seq_length": training.seq_len,
            "rotary_base": round(model.rope_theta), "norm_epsilon": model.norm_eps,
            "use_distributed_optimizer": lay.zero >= 1, "init_model_with_meta_device": lay.zero == 3,
            "overlap_grad_reduce": lay.dp * lay.cp > 1, "padded_vocab_size": -(-model.vocab_size // lay.tp) * lay.tp,
            "save": "/ckpt/run", "load": "/ckpt/run", "save_interval": LaunchOptions().train_steps}
    out = _check(MEGATRON_LM, tmp_path / "megatron_pretrain_gpt.sh", case["layout"]["gpus"], json.dumps(want),
                 env={"MEGATRON_LM": root}, trainer="megatron")
    _assert_split("megatron", case, lay, _split_line(out))


# nanotron's config module imports flash_attn (config/models_config.py -> nn/attention.py ->
# nn/ring_attention.py); setup_envs.sh builds flash-attn without its CUDA kernels, so it imports
# through flash-attn's own Triton backend. The config loader runs no kernel.
NANOTRON_ENV = {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "TRUE"}
NANOTRON = '''
import json, sys
from nanotron.config import get_config_from_file
from nanotron.parallel.pipeline_parallel.engine import AllForwardAllBackwardPipelineEngine, OneForwardOneBackwardPipelineEngine
from nanotron.parallel.tensor_parallel.nn import TensorParallelLinearMode
want = json.loads(sys.argv[2])
cfg = get_config_from_file(sys.argv[1])   # run_train.py -> DistributedTrainer(config_file) -> this
p, t, m, o = cfg.parallelism, cfg.tokens, cfg.model.model_config, cfg.optimizer
engine = {OneForwardOneBackwardPipelineEngine: "1f1b", AllForwardAllBackwardPipelineEngine: "afab"}[type(p.pp_engine)]
got = {"dp": p.dp, "tp": p.tp, "pp": p.pp, "pp_engine": engine, "cp": p.context_parallel_size,
       "ep": p.expert_parallel_size, "sequence_parallel": p.tp_mode is TensorParallelLinearMode.REDUCE_SCATTER,
       "recompute_layer": p.recompute_layer, "seq_len": t.sequence_length, "mbs": t.micro_batch_size,
       "grad_acc": t.batch_accumulation_per_replica, "gbs_seqs": cfg.global_batch_size, "zero": o.zero_stage,
       "optimizer": o.optimizer_factory.name, "model_class": type(m).__name__, "num_layers": m.num_hidden_layers,
       "hidden_size": m.hidden_size, "ffn_hidden_size": m.intermediate_size, "num_heads": m.num_attention_heads,
       "num_kv_heads": m.num_key_value_heads, "vocab_size": m.vocab_size, "rope_theta": m.rope_theta,
       "norm_eps": m.rms_norm_eps, "tied_embeddings": m.tie_word_embeddings, "qkv_bias": m.attention_bias}
moe = getattr(m, "moe_config", None)
got["moe"] = moe and {"num_experts": moe.num_experts, "top_k": moe.top_k, "ffn_hidden_size": moe.moe_intermediate_size,
                      "shared_ffn_hidden_size": moe.shared_expert_intermediate_size if moe.enable_shared_expert else 0,
                      "layers": moe.layers}
assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}
'''


# Not a golden plan: the MoE plan of issue 46 (search --model mixtral-8x7b --gpus 64 --gbs-tokens 4M
# --export nanotron: tp 1, pp 16); dp = 64/16 = 4, grad_acc = 1024/(4·1) = 256
NANOTRON_MOE = {"name": "nanotron_moe_pp16", "model": "mixtral-8x7b",
                "layout": {"gpus": 64, "pp": 16, "zero": 1, "mbs": 1, "seq_len": 4096, "gbs_seqs": 1024}}


@pytest.mark.parametrize("case", [*_cases("nanotron"), pytest.param(NANOTRON_MOE, id=NANOTRON_MOE["name"])])
def test_nanotron_loads_the_config(case, tmp_path):
    _need("nanotron.config", "nanotron", NANOTRON_ENV)
    lay = _export(case, "nanotron", tmp_path)
    model, (_, training) = _model(case), plan_from_record(case["layout"])
    # the plan's layout and the model's shape, read back from nanotron's parsed Config; nanotron
    # has no selective recompute (recompute_layer is full recompute only), and its adamW/sgd are
    # autoplan's adamw/sgd; LlamaConfig for Llama-shaped dense models, Qwen2Config otherwise
    qwen = model.moe is not None or model.model_type in ("qwen2", "qwen3")
    want = {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "pp_engine": "afab" if lay.pp_schedule == "afab" else "1f1b",
            "cp": lay.cp, "ep": lay.ep, "sequence_parallel": bool(lay.sp), "recompute_layer": lay.recompute == "full",
            "seq_len": training.seq_len, "mbs": lay.mbs, "grad_acc": lay.grad_acc, "gbs_seqs": lay.gbs_seqs,
            "zero": lay.zero, "optimizer": {"adamw": "adamW", "sgd": "sgd"}[lay.optimizer],
            "model_class": "Qwen2Config" if qwen else "LlamaConfig", "num_layers": model.num_layers,
            "hidden_size": model.hidden_size, "ffn_hidden_size": model.ffn_hidden_size,
            "num_heads": model.num_attention_heads, "num_kv_heads": model.num_kv_heads,
            "vocab_size": model.vocab_size, "rope_theta": model.rope_theta, "norm_eps": model.norm_eps,
            "tied_embeddings": model.tied_embeddings, "qkv_bias": model.qkv_bias, "moe": None}
    if model.moe is not None:  # every layer from the first after the dense ones (Qwen2Config: [-1] = all)
        moe = model.moe
        want["moe"] = {"num_experts": moe.num_experts, "top_k": moe.num_experts_per_token,
                       "ffn_hidden_size": moe.expert_ffn_hidden_size,
                       "shared_ffn_hidden_size": moe.num_shared_experts * moe.shared_expert_ffn_hidden_size,
                       "layers": list(range(moe.num_dense_layers, model.num_layers))}
    _check(NANOTRON, tmp_path / "nanotron_config.yaml", json.dumps(want), env=NANOTRON_ENV, trainer="nanotron")


NANOTRON_SPLIT = """
import json, os, sys, types, torch
import torch.distributed as tdist
from torch.testing._internal.distributed.fake_pg import FakeStore
from nanotron.config import get_config_from_file
cfg = get_config_from_file(sys.argv[1])
pp = cfg.parallelism.pp   # one process per stage: the split reads neither tp nor dp
os.environ.update(WORLD_SIZE=str(pp), RANK="0", LOCAL_RANK="0")
tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=pp)
from nanotron.parallel import ParallelContext
ParallelContext.set_device = lambda self: None   # torch.cuda.set_device: no GPU here
context = ParallelContext(tensor_parallel_size=1, pipeline_parallel_size=pp, data_parallel_size=1)
# flash_attn's Triton layer norm reads the GPU's warp size at import (ops/triton/layer_norm.py)
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(warp_size=32)
# nanotron/nn/moe.py imports grouped_gemm.ops (a CUDA extension) for GroupedMLP's forward; no
# kernel runs here, so a module whose every attribute raises stands in for it
ops = types.ModuleType("grouped_gemm.ops")
def _no_kernel(name):
    raise RuntimeError(f"grouped_gemm.ops.{name}: no CUDA kernel in this check")
ops.__getattr__ = _no_kernel
sys.modules.update({"grouped_gemm": types.ModuleType("grouped_gemm"), "grouped_gemm.ops": ops})
import nanotron.models.llama as llama, nanotron.models.qwen as qwen
import nanotron.parallel.pipeline_parallel.block as block
from nanotron.models.base import build_model
from nanotron.parallel.pipeline_parallel.block import PipelineBlock
from nanotron.random import RandomStates
for module in (llama, qwen):   # P2P allocates CUDA buffers when built; a block reads only its .pg
    module.P2P = lambda pg, device: types.SimpleNamespace(pg=pg)
# build_and_set_rank sets every block's rank and builds the blocks of this process's rank: none
block.dist = types.SimpleNamespace(get_rank=lambda pg: -1)
classes = {"LlamaConfig": llama.LlamaForTraining, "Qwen2Config": qwen.Qwen2ForTraining}  # trainer.py's
m = cfg.model.model_config
model = build_model(lambda: classes[type(m).__name__](config=m, parallel_context=context,
                    parallel_config=cfg.parallelism, random_states=RandomStates({})),
                    context, dtype=torch.bfloat16, device=torch.device("meta"))
ranks = [b.rank for name, b in model.named_modules() if isinstance(b, PipelineBlock) and name.startswith("model.decoder.")]
print("SPLIT", json.dumps([[ranks.count(rank)] for rank in range(pp)]))
"""


@pytest.mark.parametrize("case", [*_cases("nanotron"), pytest.param(NANOTRON_MOE, id=NANOTRON_MOE["name"])])
def test_nanotron_builds_the_stages_autoplan_costs(case, tmp_path):
    """nanotron's own build_model (models/base.py: its blocks' compute costs, cumulative
    thresholds) assigns the decoder layers to the ranks autoplan costs; the issue's Mixtral pp 16
    plan gets [3, 2, ..., 2, 1]."""
    _need("nanotron.config", "nanotron", NANOTRON_ENV)
    lay = _export(case, "nanotron", tmp_path)
    out = _check(NANOTRON_SPLIT, tmp_path / "nanotron_config.yaml", env=NANOTRON_ENV, trainer="nanotron")
    _assert_split("nanotron", case, lay, _split_line(out))


# Megatron-Bridge v0.3.1 (megatron-bridge 0.3.1 with megatron-core 0.16.1, setup_envs.sh). Without
# Transformer Engine nothing of megatron.bridge imports: megatron/bridge/__init__.py -> models ->
# models/conversion/auto_bridge.py -> model_bridge.py -> peft_bridge.py -> peft/canonical_lora.py ->
# peft/lora_layers.py:20 `import transformer_engine.pytorch as te`; the loader test then skips with
# that line, and the two checks below it read what imports without Bridge.
BRIDGE_PATHS = {"DATA_PATH": "/data/c4_text_document", "TOKENIZER": "meta-llama/Meta-Llama-3-70B"}


def _bridge_export(case, folder: Path):
    """The export's YAML mapping and the launch script's override words as bash passes them."""
    lay = _export(case, "megatron-bridge", folder)
    script = (folder / "megatron_bridge_pretrain.sh").read_text()
    body = script.split("OVERRIDES=(\n", 1)[1].split("\n)\n", 1)[0]
    done = subprocess.run(["bash", "-c", f'OVERRIDES=(\n{body}\n)\nprintf "%s\\0" "${{OVERRIDES[@]}}"'],
                          capture_output=True, text=True, check=True, env={**os.environ, **BRIDGE_PATHS})
    words = done.stdout.split("\0")[:-1]
    data = yaml.safe_load((folder / "megatron_bridge_overrides.yaml").read_text())
    return lay, data, words, script.rsplit("--recipe ", 1)[1].split()[0]  # the launch line (the header names it too)


def _bridge_want(case, lay) -> dict:
    """ConfigContainer attribute -> the plan's value (what a loaded config must hold)."""
    _, training = plan_from_record(case["layout"])
    model = _model(case)
    want = {"model.tensor_model_parallel_size": lay.tp, "model.pipeline_model_parallel_size": lay.pp,
            "model.virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
            "model.context_parallel_size": lay.cp, "model.expert_model_parallel_size": lay.ep,
            "model.expert_tensor_parallel_size": lay.etp, "model.sequence_parallel": bool(lay.sp),
            "model.seq_length": training.seq_len, "dataset.sequence_length": training.seq_len,
            "model.num_layers": model.num_layers, "model.hidden_size": model.hidden_size,
            "train.micro_batch_size": lay.mbs, "train.global_batch_size": lay.gbs_seqs,
            "ddp.use_distributed_optimizer": lay.zero >= 1, "ddp.use_megatron_fsdp": lay.zero == 3,
            "model.recompute_granularity": None if lay.recompute == "none" else lay.recompute,
            "model.cpu_offloading_num_layers": lay.offload_layers, "mixed_precision.bf16": True,
            "mixed_precision.fp8": "hybrid" if lay.precision == "fp8" else None,
            "checkpoint.save": None, "checkpoint.load": None}
    if not lay.offload_layers:
        del want["model.cpu_offloading_num_layers"]  # the recipe's own (0): not the plan's to say
    return want


def _te_stub_env() -> dict[str, str]:
    """The environment that puts the Transformer Engine import stub (``stubs/transformer_engine``)
    first on the path of a Megatron-Bridge check."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE / "stubs"), os.environ.get("PYTHONPATH")]))}


BRIDGE_LOADER = '''
import inspect, json, os, re, sys, types, torch
from pathlib import Path
# The recipe picks the MoE dispatcher backend by the GPU (training/flex_dispatcher_backend.py
# apply_flex_dispatcher_backend reads torch.cuda.get_device_properties(0)): the plan's H100.
torch.cuda.get_device_properties = lambda *a: types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100 80GB HBM3")
from megatron.bridge import recipes
from megatron.bridge.training.mixed_precision import MixedPrecisionConfig
from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
path, recipe, words, want = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
# The recipe reads its model's config.json from the Hugging Face Hub (AutoBridge.from_hf_pretrained
# in the recipe function); offline, it is the preset's transcription of that file (model_db, whose
# sources name it), laid out as the Hub's cache (HF_HUB_CACHE, HF_HUB_OFFLINE=1).
fields = json.loads(sys.argv[5])
repo_id = re.search(r'from_hf_pretrained\\("([^"]+)"', inspect.getsource(getattr(recipes, recipe))).group(1)
repo = Path(os.environ["HF_HUB_CACHE"]) / ("models--" + repo_id.replace("/", "--"))
(repo / "snapshots" / ("0" * 40)).mkdir(parents=True, exist_ok=True)
(repo / "refs").mkdir(exist_ok=True)
(repo / "refs" / "main").write_text("0" * 40)
config = {**fields, "architectures": [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[fields["model_type"]]], "torch_dtype": "bfloat16"}
(repo / "snapshots" / ("0" * 40) / "config.json").write_text(json.dumps(config))
for how in ("yaml", "hydra"):   # the YAML file, and run_recipe.py's Hydra words
    try:
        cfg = getattr(recipes, recipe)()
    except OSError as error:  # AutoBridge.from_hf_pretrained reads the model's config from the Hub
        print("SKIP: the recipe could not read the model's Hugging Face config:", error)
        sys.exit(0)
    cfg = process_config_with_overrides(cfg, **({"config_filepath": path} if how == "yaml" else {"cli_overrides": words}))
    assert isinstance(cfg.mixed_precision, (MixedPrecisionConfig, str)), (how, cfg.mixed_precision)
    if isinstance(cfg.mixed_precision, str):
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config
        cfg.mixed_precision = get_mixed_precision_config(cfg.mixed_precision)
    got = {key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in want}
    assert got == want, (how, {k: (got[k], want[k]) for k in want if got[k] != want[k]})
'''


@pytest.mark.parametrize("case", _cases("megatron-bridge"))
def test_megatron_bridge_loads_the_overrides_over_its_recipe(case, tmp_path):
    """Megatron-Bridge 0.3.1's own recipe and ``process_config_with_overrides`` on the export, with
    Transformer Engine replaced by an import stub (``stubs/transformer_engine``: a CUDA build, not on
    a CPU; the loader runs none of its kernels) and the recipe's Hugging Face config offline."""
    env = {**_te_stub_env(), "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    _need("megatron.bridge.training.utils.omegaconf_utils", "megatron-bridge", env=env)
    lay, _, words, recipe = _bridge_export(case, tmp_path)
    fields = {k: v for k, v in yaml.safe_load((MODEL_DB / f"{case['model']}.yaml").read_text()).items()
              if k not in PRESET_KEYS}
    out = _check(BRIDGE_LOADER, tmp_path / "megatron_bridge_overrides.yaml", recipe, json.dumps(words),
                 json.dumps(_bridge_want(case, lay)), json.dumps(fields), trainer="megatron-bridge", env=env)
    if out.startswith("SKIP: "):
        pytest.skip(out[len("SKIP: "):].strip())


BRIDGE_HYDRA = '''
import json, sys
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
path, words, data, paths = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
assert OmegaConf.to_container(OmegaConf.load(path)) == data   # process_config_with_overrides' OmegaConf.load
parsed = OverridesParser.create().parse_overrides(overrides=words)   # as parse_hydra_overrides
got = {}
for override in parsed:
    value = override.value()
    section, _, key = override.key_or_group.partition(".")
    if key:
        got.setdefault(section, {})[key] = value
    else:
        got[section] = value
# the script's data and tokenizer words read its required DATA_PATH and TOKENIZER (not in the YAML)
assert got["dataset"].pop("blend") == data["dataset"].pop("blend", [[paths["DATA_PATH"]], None])
assert got["tokenizer"].pop("tokenizer_model") == data["tokenizer"].pop("tokenizer_model", paths["TOKENIZER"])
assert got == data, {k: (got.get(k), data.get(k)) for k in set(got) | set(data) if got.get(k) != data.get(k)}
'''


@pytest.mark.parametrize("case", _cases("megatron-bridge"))
def test_megatron_bridge_script_overrides_parse_as_the_yaml(case, tmp_path):
    """Bridge's parsers (hydra-core 1.3.2, omegaconf 2.3), which import without Bridge: the launch
    script's words parse to the override file's mapping."""
    _need("hydra.core.override_parser.overrides_parser", "megatron-bridge")
    _, data, words, _ = _bridge_export(case, tmp_path)
    _check(BRIDGE_HYDRA, tmp_path / "megatron_bridge_overrides.yaml", json.dumps(words), json.dumps(data),
           json.dumps(BRIDGE_PATHS), trainer="megatron-bridge")


BRIDGE_CORE = '''
import dataclasses, json, sys, torch
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer import TransformerConfig
data, shape, want = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
names = {f.name for f in dataclasses.fields(TransformerConfig)}
precision = {k: v for k, v in data["mixed_precision"].items() if k in names and not isinstance(v, dict)}
dtypes = {"params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16}   # bf16_mixed's
# the model section over the shape the recipe's provider takes from the Hugging Face config, with
# the precision fields MixedPrecisionConfig.setup copies onto it (training/mixed_precision.py)
model = {**shape, **{k: v for k, v in data["model"].items() if k in names}, **precision, **dtypes}
config = TransformerConfig(**model)
ddp = DistributedDataParallelConfig(**data["ddp"], grad_reduce_in_fp32=data["mixed_precision"]["grad_reduce_in_fp32"])
optimizer = OptimizerConfig(**data["optimizer"], bf16=True, params_dtype=torch.bfloat16)
objects = {"model": config, "ddp": ddp, "optimizer": optimizer}
got = {key: getattr(objects[key.split(".")[0]], key.split(".")[1]) for key in want}
assert got == want, {k: (got[k], want[k]) for k in want if got[k] != want[k]}
''' + MEGATRON_SPLIT


@pytest.mark.parametrize("case", _cases("megatron-bridge"))
def test_megatron_core_of_bridge_accepts_the_model_ddp_and_optimizer(case, tmp_path):
    """megatron-core 0.16.1 (Bridge v0.3.1's core): GPTModelProvider is a TransformerConfig, the ddp
    and optimizer sections Megatron-Core's own dataclasses; their __post_init__ validates them."""
    _need("megatron.core.transformer", "megatron-bridge")
    lay, data, _, _ = _bridge_export(case, tmp_path)
    model = _model(case)
    shape = {"num_attention_heads": model.num_attention_heads, "gated_linear_unit": True,
             "normalization": "RMSNorm", "add_bias_linear": False, "apply_rope_fusion": False}
    if model.moe is not None:
        shape.update(num_moe_experts=model.moe.num_experts, moe_router_topk=model.moe.num_experts_per_token,
                     moe_ffn_hidden_size=model.moe.expert_ffn_hidden_size)
    want = {k: v for k, v in _bridge_want(case, lay).items() if k.split(".")[0] in ("model", "ddp")
            and k not in ("model.seq_length",)}   # seq_length: GPTModelProvider's, not TransformerConfig's
    # TransformerConfig.__post_init__ asks Transformer Engine's version for an FP8 MoE
    # (`is_te_min_version('1.7.0.dev0')`): the import stub's (TE is a CUDA build, not on a CPU)
    out = _check(BRIDGE_CORE, json.dumps(data), json.dumps(shape), json.dumps(want), trainer="megatron-bridge",
                 env=_te_stub_env())
    _assert_split("megatron-bridge", case, lay, _split_line(out))
