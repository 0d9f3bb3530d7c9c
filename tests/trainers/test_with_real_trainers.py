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
* Megatron-LM core_v0.15.3 (``MEGATRON_LM`` = a checkout): ``parse_args`` + ``validate_args`` +
  ``core_transformer_config_from_args`` on the script's arguments (GPU capability stubbed to
  Hopper; Transformer Engine kernel switches off).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.export import LaunchOptions, render
from autoplan.specs.models import load_model

pytestmark = pytest.mark.trainers
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "export"
CASES = yaml.safe_load((GOLDEN / "cases.yaml").read_text())["cases"]


def _cases(trainer):
    return [pytest.param(c, id=c["name"]) for c in CASES if trainer in c["trainers"]]


def _python(trainer: str) -> str:
    """The interpreter of ``trainer``'s environment (AUTOPLAN_<TRAINER>_PYTHON, else this one)."""
    return os.environ.get(f"AUTOPLAN_{trainer.upper()}_PYTHON", sys.executable)


def _need(module, trainer):
    """Skip unless ``module`` imports in ``trainer``'s interpreter (an import that fails, e.g. on
    a numpy ABI clash, skips rather than fails)."""
    python = _python(trainer)
    if python == sys.executable and importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"{module} is not installed (see docs/export.md)")
    done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode:
        pytest.skip(f"{module} does not import in {python}: {done.stderr.strip().splitlines()[-1:]}")


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


TORCHTITAN = '''
import importlib, sys
folder, gpus, eps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sys.path.insert(0, folder)
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
    if case["layout"].get("precision") == "fp8":
        pytest.skip("torchtitan's Float8 converter needs an SM89+ GPU and torchao")
    _export(case, "torchtitan", tmp_path)
    paths = {"DATA_PATH": "/data/c4", "TOKENIZER": "/models/tokenizer"}  # read, not opened, by the config
    _check(TORCHTITAN, tmp_path, case["layout"]["gpus"], _model(case).norm_eps, env=paths, trainer="torchtitan")


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
    if case["layout"].get("precision") == "fp8":
        pytest.skip("megatron-core checks Transformer Engine's version for FP8 MoE")
    lay = _export(case, "megatron", tmp_path)
    _check(MEGATRON_CORE, tmp_path / "megatron_pretrain_gpt.sh", case["layout"]["gpus"], lay.grad_acc,
           trainer="megatron")


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
A.core_transformer_config_from_args(args)
got = {k: getattr(args, k) for k in want}
assert got == want, (got, want)
'''


@pytest.mark.parametrize("case", _cases("megatron"))
def test_megatron_lm_parses_and_validates_the_arguments(case, tmp_path):
    root = os.environ.get("MEGATRON_LM", "")
    if not (Path(root) / "megatron" / "training" / "arguments.py").exists():
        pytest.skip("set MEGATRON_LM to a Megatron-LM core_v0.15.3 checkout")
    _need("torch", "megatron")
    version = case.get("trainer_version", {}).get("megatron")
    if version:
        pytest.skip(f"needs Megatron-LM {version}; MEGATRON_LM is the core_v0.15.3 checkout")
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
    _check(MEGATRON_LM, tmp_path / "megatron_pretrain_gpt.sh", case["layout"]["gpus"], json.dumps(want),
           trainer="megatron")
