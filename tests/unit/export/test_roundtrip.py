"""Round trip: parse every emitted file back with the format's own parser and recover the layout.

shlex for the launch scripts, tomllib for torchtitan's TOML, ``ast`` for its Python module,
yaml.safe_load for nanotron, json for DeepSpeed. Placement is the one knob no file states.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.cost.stages import virtual_stage_layers
from autoplan.export import LaunchOptions, render
from autoplan.export.megatron_model import pipeline_layout
from autoplan.specs.models import load_model

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "export"
CASES = yaml.safe_load((GOLDEN / "cases.yaml").read_text())["cases"]
# Extra layouts beyond the golden cases, to cover more flag combinations.
EXTRA = [
    ("llama3-8b", {"gpus": 8, "tp": 8, "sp": False, "zero": 0, "seq_len": 8192, "gbs_seqs": 64,
                   "precision": "fp8"}, ["megatron"]),  # nanotron and DeepSpeed train in bf16 only
    ("llama3-8b", {"gpus": 8, "tp": 8, "sp": False, "zero": 0, "seq_len": 8192, "gbs_seqs": 64},
     ["nanotron", "deepspeed"]),
    ("llama2-70b", {"gpus": 64, "tp": 8, "pp": 8, "zero": 1, "mbs": 1, "seq_len": 4096, "gbs_seqs": 256,
                    "recompute": "selective"}, ["megatron", "deepspeed", "nanotron"]),
    ("llama3-8b", {"gpus": 16, "zero": 2, "mbs": 2, "seq_len": 8192, "gbs_seqs": 64}, ["deepspeed"]),
    ("deepseek-v3", {"gpus": 256, "tp": 2, "pp": 1, "ep": 32, "etp": 1, "zero": 1, "seq_len": 4096,
                     "gbs_seqs": 1024}, ["megatron"]),
    ("llama3-8b", {"gpus": 32, "tp": 2, "pp": 2, "vpp": 4, "zero": 3, "seq_len": 8192,
                   "gbs_seqs": 64}, ["torchtitan"]),
    # Unequal stages (exported under --allow-uneven-pp): 32 layers on 3 and on 3·2 stages.
    ("llama3-8b", {"gpus": 24, "pp": 3, "zero": 0, "gbs_seqs": 48, "seq_len": 4096},
     ["megatron", "torchtitan", "nanotron"]),
    ("llama3-8b", {"gpus": 24, "pp": 3, "vpp": 2, "zero": 1, "gbs_seqs": 96, "seq_len": 4096}, ["megatron"]),
]
VERSIONS = {(c["model"], str(c["layout"]), t): v for c in CASES for t, v in c.get("trainer_version", {}).items()}
RUNS = ([(c["model"], c["layout"], t) for c in CASES for t in c["trainers"]]
        + [(m, lay, t) for m, lay, ts in EXTRA for t in ts])
IDS = [f"{m}-{t}-{i}" for i, (m, _, t) in enumerate(RUNS)]
COMPARED = ("gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "grad_acc", "seq_len",
            "gbs_seqs", "sp", "recompute", "precision", "pp_schedule", "pp_split")
# torch.distributed.pipelining schedule names -> autoplan's pp_schedule (1F1B and Interleaved1F1B
# are the default the exporter writes for vpp = 1 and vpp > 1).
TORCH_SCHEDULES = {"1F1B": "default", "Interleaved1F1B": "default", "GPipe": "afab",
                   "InterleavedZeroBubble": "zb-h1", "ZBVZeroBubble": "zb-v", "DualPipeV": "dualpipev"}


def bash_words(script: str, name: str = "ARGS") -> list[str]:
    """The words of the bash array ``name=( ... )`` as bash would split them."""
    body = script.split(f"{name}=(\n", 1)[1].split("\n)\n", 1)[0]
    return shlex.split(body, comments=False)


def bash_var(script: str, name: str) -> str:
    line = next(line for line in script.splitlines() if line.startswith(f"{name}="))
    return shlex.split(line.split("=", 1)[1])[0]


def flags(words: list[str]) -> dict[str, str | None]:
    """'--tp 2 --bf16' -> {'--tp': '2', '--bf16': None} (the last of a repeated flag wins)."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[word] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def _gpus(script: str) -> int:
    return int(bash_var(script, "NPROC_PER_NODE")) * int(bash_var(script, "NNODES"))


def _finish(values: dict, model) -> dict:
    """Derive dp and grad_acc the way each trainer does: from the world size and the batch;
    the pipeline schedule and split are the defaults unless the parser found others."""
    values.setdefault("pp_schedule", "default")
    values.setdefault("pp_split", "balanced")
    values["dp"] = values["gpus"] // (values["tp"] * values["pp"] * values["cp"])
    values["grad_acc"] = values["gbs_seqs"] // (values["mbs"] * values["dp"])
    return values


def megatron_layout_stages(text: str) -> list[str]:
    """The stages of a --pipeline-model-parallel-layout, unrolled as Megatron core_v0.15.3 does
    (``PipelineParallelLayerLayout.parse_str_to_list``)."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    return text.split("|")


@pytest.mark.parametrize(("num_layers", "pp", "vpp"),
                         [(61, 16, 1), (126, 16, 1), (30, 4, 2), (10, 3, 1), (14, 4, 1), (5, 2, 2)])
def test_megatron_layout_string_holds_the_costed_split(num_layers, pp, vpp):
    stages = megatron_layout_stages(pipeline_layout(num_layers, pp, vpp))
    assert len(stages) == pp * vpp  # Megatron: vpp = len(layout) / pp
    assert stages[0].startswith("E") and stages[-1].endswith("L")
    assert [s.count("t") for s in stages] == virtual_stage_layers(num_layers, pp, vpp)


def test_megatron_layout_places_mtp_before_the_loss():
    """DeepSeek-V3 (61 layers, one MTP depth) on pp 16: the 'm' ends the last stage before 'L', after
    every decoder layer (Megatron's validate_layer_layout), and the decoder split is unchanged."""
    stages = megatron_layout_stages(pipeline_layout(61, 16, 1, mtp=1))
    assert stages[-1].endswith("tmL") and "".join(stages).count("m") == 1
    assert [s.count("t") for s in stages] == virtual_stage_layers(61, 16, 1)


def from_megatron(files, model) -> dict:
    script = files["megatron_pretrain_gpt.sh"]
    f = flags(bash_words(script))
    pp = int(f["--pipeline-model-parallel-size"])
    per_virtual = f.get("--num-layers-per-virtual-pipeline-stage")
    layout = f.get("--pipeline-model-parallel-layout")  # unequal stages: vpp = stages / pp
    zero = 3 if "--use-megatron-fsdp" in f else 1 if "--use-distributed-optimizer" in f else 0
    recompute = f.get("--recompute-granularity") or "none"
    values = {"gpus": _gpus(script), "tp": int(f["--tensor-model-parallel-size"]), "pp": pp,
              "vpp": (model.num_layers // (pp * int(per_virtual)) if per_virtual
                      else len(megatron_layout_stages(layout)) // pp if layout else 1),
              "cp": int(f["--context-parallel-size"]), "ep": int(f.get("--expert-model-parallel-size", 1)),
              "etp": int(f.get("--expert-tensor-parallel-size", 1)), "zero": zero,
              "mbs": int(f["--micro-batch-size"]), "gbs_seqs": int(f["--global-batch-size"]),
              "seq_len": int(f["--seq-length"]), "sp": "--sequence-parallel" in f, "recompute": recompute,
              "precision": "fp8" if "--fp8-format" in f else "bf16"}
    if layout:  # the embedding and the loss placed as layers (pp_split embed-loss)
        counts = [stage.count("t") for stage in megatron_layout_stages(layout)]
        vpp = values["vpp"]
        if counts == virtual_stage_layers(model.num_layers, pp, vpp, embed_loss=True) != virtual_stage_layers(
                model.num_layers, pp, vpp):
            values["pp_split"] = "embed-loss"
    assert int(f["--num-layers"]) == model.num_layers and int(f["--hidden-size"]) == model.hidden_size
    assert int(f["--padded-vocab-size"]) >= model.vocab_size
    return _finish(values, model)


def _hydra_parsed(value: str):
    """A Hydra override value back as data: numbers (YAML 1.1 reads '3e-05' as text), quoted
    strings, the rest as YAML flow (null, true, [a,b])."""
    try:
        return int(value) if value.lstrip("-").isdigit() else float(value)
    except ValueError:
        return yaml.safe_load(value.replace("'", '"') if "'" in value else value)


def from_megatron_bridge(files, model) -> dict:
    """The layout from the override YAML (yaml.safe_load); the launch script's overrides must be
    the same mapping (Hydra's ``section.key=value`` words)."""
    data = yaml.safe_load(files["megatron_bridge_overrides.yaml"])
    script = files["megatron_bridge_pretrain.sh"]
    words = [w for w in bash_words(script, "OVERRIDES") if "$" not in w]
    assert len(words) == sum(1 if "_target_" in section else len(section) for section in data.values())
    for word in words:
        key, value = word.split("=", 1)
        section, _, name = key.partition(".")
        if name:
            assert _hydra_parsed(value) == data[section][name], word
        else:  # a section written whole: Hydra's {key:value,...} as YAML flow (keys and values bare)
            assert yaml.safe_load(value.replace(":", ": ").replace(",", ", ")) == data[section], word
    m, train, ddp, prec = data["model"], data["train"], data["ddp"], data["mixed_precision"]
    layout = m.get("pipeline_model_parallel_layout")
    pp = m["pipeline_model_parallel_size"]
    granularity = m.get("recompute_granularity")
    values = {"gpus": _gpus(script), "tp": m["tensor_model_parallel_size"], "pp": pp,
              "vpp": len(megatron_layout_stages(layout)) // pp if layout else m["virtual_pipeline_model_parallel_size"] or 1,
              "cp": m["context_parallel_size"], "ep": m["expert_model_parallel_size"],
              "etp": m["expert_tensor_parallel_size"],
              "zero": 3 if ddp.get("use_megatron_fsdp") else 1 if ddp["use_distributed_optimizer"] else 0,
              "mbs": train["micro_batch_size"], "gbs_seqs": train["global_batch_size"],
              "seq_len": data["dataset"]["sequence_length"], "sp": m["sequence_parallel"],
              "recompute": granularity or "none", "precision": "fp8" if prec.get("fp8") else "bf16"}
    if layout:
        counts = [stage.count("t") for stage in megatron_layout_stages(layout)]
        if counts == virtual_stage_layers(model.num_layers, pp, values["vpp"], embed_loss=True) != virtual_stage_layers(
                model.num_layers, pp, values["vpp"]):
            values["pp_split"] = "embed-loss"
    assert m["num_layers"] == model.num_layers and m["hidden_size"] == model.hidden_size
    assert m["seq_length"] == values["seq_len"]
    return _finish(values, model)


def _torchtitan_common(par: dict, train: dict, model, gpus: int) -> dict:
    pp = par["pipeline_parallel_degree"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    mbs = par["pipeline_parallel_microbatch_size"] if pp > 1 else train["local_batch_size"]
    per_stage = par.get("pipeline_parallel_layers_per_stage")  # absent: torchtitan's own split
    schedule = par.get("pipeline_parallel_schedule")
    multi = schedule not in (None, "1F1B", "GPipe")  # torchtitan: 2 stages per rank by default
    vpp = model.num_layers // (pp * per_stage) if pp > 1 and per_stage else 2 if multi else 1
    if pp > 1 and schedule in ("1F1B", "Interleaved1F1B"):
        assert schedule == ("Interleaved1F1B" if vpp > 1 else "1F1B")
    return {"pp_schedule": TORCH_SCHEDULES[schedule] if pp > 1 else "default","gpus": gpus, "tp": par["tensor_parallel_degree"], "pp": pp, "vpp": vpp,
            "cp": par["context_parallel_degree"], "ep": par["expert_parallel_degree"], "etp": 1,
            "zero": 3 if par["data_parallel_shard_degree"] > 1 or dp == 1 else 0, "mbs": mbs,
            "gbs_seqs": train["global_batch_size"], "seq_len": train["seq_len"]}


def from_torchtitan_toml(files, model, gpus: int) -> dict:
    job = tomllib.loads(files["torchtitan_job.toml"])
    values = _torchtitan_common(job["parallelism"], job["training"], model, gpus)
    values["sp"] = values["tp"] > 1  # 0.2.2 always uses sequence parallel with TP
    values["recompute"] = job["activation_checkpoint"]["mode"]
    values["precision"] = "fp8" if "quantize.linear.float8" in job["model"].get("converters", []) else "bf16"
    return _finish(values, model)


def _call_kwargs(tree: ast.AST, name: str) -> dict:
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == name)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def from_torchtitan_module(files, model, gpus: int) -> dict:
    source = files["torchtitan_autoplan.py"]
    tree = ast.parse(source)
    compile(tree, "torchtitan_autoplan.py", "exec")  # valid Python
    par, train = _call_kwargs(tree, "ParallelismConfig"), _call_kwargs(tree, "TrainingConfig")
    values = _torchtitan_common(par, train, model, gpus)
    values["sp"] = par["enable_sequence_parallel"]
    trainer_call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                        and getattr(n.func, "attr", None) == "Config"
                        and any(kw.arg == "activation_checkpoint" for kw in n.keywords))
    ac = ast.unparse(next(kw.value for kw in trainer_call.keywords if kw.arg == "activation_checkpoint"))
    values["recompute"] = {"None": "none", "SelectiveAC.Config()": "selective", "FullAC.Config()": "full"}[ac]
    values["precision"] = "fp8" if "Float8LinearConverter.Config(" in source.split("def autoplan_config")[1] else "bf16"
    plan = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PLAN")
    values["plan"] = ast.literal_eval(plan.value)
    return _finish(values, model)


def from_nanotron(files, model) -> dict:
    config = yaml.safe_load(files["nanotron_config.yaml"])
    par, tokens = config["parallelism"], config["tokens"]
    mc = config["model"]["model_config"]
    assert (mc["num_hidden_layers"], mc["hidden_size"]) == (model.num_layers, model.hidden_size)
    values = {"gpus": par["dp"] * par["tp"] * par["pp"] * par["context_parallel_size"], "tp": par["tp"],
              "pp": par["pp"], "vpp": 1, "cp": par["context_parallel_size"], "ep": par["expert_parallel_size"],
              "etp": 1, "zero": config["optimizer"]["zero_stage"], "mbs": tokens["micro_batch_size"],
              "seq_len": tokens["sequence_length"], "sp": par["tp_mode"] == "REDUCE_SCATTER",
              "recompute": "full" if par["recompute_layer"] else "none", "precision": "bf16",
              "pp_schedule": "afab" if par["pp_engine"] == "afab" else "default"}
    values["gbs_seqs"] = par["dp"] * tokens["micro_batch_size"] * tokens["batch_accumulation_per_replica"]
    return _finish(values, model)


def from_deepspeed(files, model) -> dict:
    config = json.loads(files["deepspeed_config.json"])
    script = files["deepspeed_launch.sh"]
    f = flags(bash_words(script))
    tp = int(f.get("--tensor-model-parallel-size", 1))
    pp = int(f.get("--pipeline-model-parallel-size", 1))
    gpus = _gpus(script)
    dp = gpus // (tp * pp)
    mbs, acc = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    assert config["train_batch_size"] == mbs * acc * dp  # DeepSpeed's _batch_assertion
    if "--zero-stage" in f:
        assert int(f["--zero-stage"]) == config["zero_optimization"]["stage"]
    recompute = "full" if "activation_checkpointing" in config else f.get("--recompute-granularity") or "none"
    values = {"gpus": gpus, "tp": tp, "pp": pp, "vpp": 1, "cp": 1,
              "ep": int(f.get("--moe-expert-parallel-size",  # plain DeepSpeed: AutoEP in the JSON
                              config.get("expert_parallel", {}).get("autoep_size", 1))),
              "etp": tp if "--enable-expert-tensor-parallelism" in f else 1,
              "zero": config["zero_optimization"]["stage"], "mbs": mbs, "gbs_seqs": config["train_batch_size"],
              "seq_len": int(f["--seq-length"]) if "--seq-length" in f else None,
              "sp": "--sequence-parallel" in f, "recompute": recompute, "precision": "bf16"}
    return _finish(values, model)


@pytest.mark.parametrize(("model_name", "values", "trainer"), RUNS, ids=IDS)
def test_files_parse_back_to_the_layout(model_name, values, trainer):
    model = load_model(GOLDEN / model_name if model_name.endswith(".json") else model_name)
    layout, training = plan_from_record(values)
    files = render(trainer, model, layout, training, LaunchOptions(), allow_uneven_pp=True,
                   trainer_version=VERSIONS.get((model_name, str(values), trainer))).files
    expected = layout.to_record(training)
    if trainer == "megatron":
        recovered = [(from_megatron(files, model), expected)]
    elif trainer == "megatron-bridge":
        recovered = [(from_megatron_bridge(files, model), expected)]
    elif trainer == "torchtitan":
        module = from_torchtitan_module(files, model, training.gpus)
        assert module.pop("plan") == expected
        # 0.2.2 always applies sequence parallel with TP (a warning when the plan says sp=false)
        recovered = [(module, expected),
                     (from_torchtitan_toml(files, model, training.gpus), {**expected, "sp": layout.tp > 1})]
        if layout.dp == 1:  # one DP rank: replicate and shard are the same thing
            for got, _ in recovered:
                got["zero"] = layout.zero
    elif trainer == "nanotron":
        # no selective recompute in nanotron (reported as a warning)
        recovered = [(from_nanotron(files, model), {
            **expected, "recompute": "full" if layout.recompute == "full" else "none"})]
    else:
        got = from_deepspeed(files, model)
        if got["seq_len"] is None:  # plain DeepSpeed: the training script owns seq_len
            got["seq_len"] = training.seq_len
        # plain DeepSpeed has no selective recompute; Megatron-DeepSpeed's checkpoints nothing with
        # flash attention (checkpoint_core_attention is set for unfused attention only), so no flag
        selective_is_none = layout.recompute == "selective" and (
            layout.tp == layout.pp == 1 or training.attention_kernel == "flash")
        recovered = [(got, {**expected,
                            "recompute": "none" if selective_is_none else layout.recompute})]
    for got, want in recovered:
        assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}


def test_shell_words_survive_bash_quoting():
    """A value with spaces and quotes comes back as one word."""
    launch = LaunchOptions(data_path="/data/my set/it's \"here\"", tokenizer="a b")
    plan = plan_from_record({"gpus": 8, "tp": 2, "seq_len": 4096, "gbs_seqs": 16})
    script = render("megatron", load_model("llama3-8b"), *plan, launch).files["megatron_pretrain_gpt.sh"]
    f = flags(bash_words(script))
    assert f["--data-path"] == launch.data_path and f["--tokenizer-model"] == "a b"
