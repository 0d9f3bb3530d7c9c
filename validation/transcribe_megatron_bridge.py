"""Write ``megatron_bridge_perf_summary.csv`` from a Megatron-Bridge git checkout.

    python validation/transcribe_megatron_bridge.py /path/to/Megatron-Bridge > validation/megatron_bridge_perf_summary.csv

Reads every pre-training, SFT and LoRA table row of ``docs/performance-summary-archive.md`` and
``docs/performance-summary.md`` at DOCS_COMMIT (a cell "A (B)" with tokens "x (y)" becomes two
lines: ``cell_value`` first and parenthesised), and for the Llama pre-training rows of the
releases with a precision column (25.11 on) the workload base config the performance scripts
ran with: matched on model, GPU, precision, GPUs, global batch, micro-batch, tp, pp, cp, vp, ep
(and Megatron-FSDP where the page has an FSDP column) among the configs of
``scripts/performance/configs/**/workload_base_configs.py`` at the tags of the row's release
(``RELEASE_TAGS``), else at any tag (``recipe_match`` "other tag"), else none; where the
matching configs of those tags disagree, the earliest tag's (", tags disagree"). The configs are
read by executing those files with the tag's own ``WorkloadBaseConfig`` dataclass (plain
``dataclasses.replace`` calls; nothing of Megatron-Bridge is imported). Not part of the
package: it documents how the CSV was made (autoplan/calibration/megatron_bridge_source.py reads it).
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import json
import re
import subprocess
import sys
import typing

DOCS_COMMIT = "4ab94dfad36641cabdeb96452b21bf676aac4772"
DOCS = ("docs/performance-summary-archive.md", "docs/performance-summary.md")
RELEASE_TAGS = {"25.11": ("v0.2.0", "v0.2.1", "v0.2.2"), "26.02": ("v0.3.0",), "26.02.01": ("v0.3.1",),
                "26.04": ("v0.4.0",), "26.04.01": ("v0.4.1", "v0.4.2"), "26.06": ("v0.5.0",), "26.06.01": ("v0.5.1",)}
ALL_TAGS = tuple(t for tags in RELEASE_TAGS.values() for t in tags)
MODELS = {"LLAMA3_8B": "LLAMA3_8B", "LLAMA3_70B": "LLAMA3_70B", "LLAMA3.1_405B": "LLAMA31_405B",
          "Qwen3_30B_a3B": "QWEN3_30B_A3B", "Qwen3_235B_a22B": "QWEN3_235B_A22B", "DeepSeekV3": "DEEPSEEK_V3",
          "DeepSeekV3 (w/o MTP)": "DEEPSEEK_V3", "DeepSeekV3 (w/ MTP)": "DEEPSEEK_V3"}
PRECISIONS = {"BF16": "BF16", "FP8": "FP8_CS", "FP8-CS": "FP8_CS", "FP8-MX": "FP8_MX", "MXFP8": "FP8_MX",
              "NVFP4": "NVFP4"}
CONFIG_NAME = re.compile(r"^(LLAMA3_8B|LLAMA3_70B|LLAMA31_405B|QWEN3_30B_A3B|QWEN3_235B_A22B|DEEPSEEK_V3)_(?:PRETRAIN_CONFIG_)?(GB300|GB200|B300|B200|H100)_"
                         r"(BF16|FP8_CS|FP8_MX|FP8_DS|FP8_SC|NVFP4)(?:_V\d+|_BASE_CONFIG)?$")
KNOBS = ("use_megatron_fsdp", "cpu_offloading_num_layers", "recompute_num_layers", "recompute_modules",
         "cuda_graph_impl", "cuda_graph_scope", "pp_layout", "nccl_ub", "fp8_dot_product_attention",
         "expert_tensor_parallel_size", "moe_flex_dispatcher_backend", "moe_a2a_overlap")
FIELDS = ("release", "task", "system", "model", "precision", "cell_value", "num_gpus", "gbs", "mbs", "seq_len",
          "fsdp", "tp", "pp", "cp", "vp", "ep", "ga", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
          "recipe_match", "recipe_config", *KNOBS, "source")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def page_rows(text: str) -> list[dict[str, str]]:
    """The table rows of one page, each with its release, task, and model or system heading."""
    rows, release, task, model, system, header = [], None, None, None, None, None
    for line in text.splitlines():
        if m := re.match(r"^## (\S+) NeMo Container", line):
            release, task = m.group(1), None
        elif m := re.match(r"^### (.+?) Performance", line):
            task, header = m.group(1).strip(), None
        elif m := re.match(r"^####\s+Model:\s*(.+)$", line):
            model, system = m.group(1).strip(), None
        elif m := re.match(r"^####\s+System:\s*(.+)$", line):
            system, model = m.group(1).strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in ("System", "Model"):
                header = cells
            elif header and not set("".join(cells)) <= set("-: "):
                row = dict(zip(header, cells), release=release, task=task)
                row.setdefault("Model", model)
                row.setdefault("System", system)
                rows.append(row)
    return rows


def split_two_value_cells(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    out = []
    for r in rows:
        p = re.match(r"^(\S+) \((\S+)\)$", r.get("Precision", ""))
        t = re.match(r"^(\d+) \((\d+)\)$", r["Tokens / sec / GPU"])
        if p and t:
            out.append({**r, "Precision": p.group(1), "Tokens / sec / GPU": t.group(1), "cell_value": "first"})
            out.append({**r, "Precision": p.group(2), "Tokens / sec / GPU": t.group(2), "cell_value": "parenthesised"})
        else:
            out.append(r)
    return out


def workload_class(repo: str, tag: str) -> type:
    """The tag's WorkloadBaseConfig dataclass, compiled from its source alone."""
    tree = ast.parse(git(repo, "show", f"{tag}:scripts/performance/utils/utils.py"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkloadBaseConfig")
    namespace = {"dataclass": dataclasses.dataclass, "field": dataclasses.field, **vars(typing)}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "utils.py", "exec"), namespace)
    return namespace["WorkloadBaseConfig"]


def configs(repo: str) -> list[dict]:
    out = []
    for tag in ALL_TAGS:
        cls = workload_class(repo, tag)
        paths = [p for p in git(repo, "ls-tree", "-r", "--name-only", tag, "scripts/performance/configs").split()
                 if re.search(r"(llama3?1?|qwen3?|deepseek)/.*workload_base_configs\.py$", p)]
        for path in paths:
            namespace = {"WorkloadBaseConfig": cls}
            exec(compile(git(repo, "show", f"{tag}:{path}").replace("from utils.utils import WorkloadBaseConfig", ""),
                         path, "exec"), namespace)
            for name, value in namespace.items():
                if isinstance(value, cls) and (m := CONFIG_NAME.match(name)):
                    out.append({**dataclasses.asdict(value), "tag": tag, "file": path, "name": name,
                                "model": m.group(1), "gpu": m.group(2), "precision": m.group(3)})
    return out


def degree(text: str | None, default: int = 1) -> int:
    text = (text or "").strip()
    return default if text in ("", "n/a") else int(text)


def layout_key(r: dict[str, str]) -> tuple:
    return (int(r["#-GPUs"]), int(r["GBS"]), int(r["MBS"]), degree(r["TP"]), degree(r["PP"]), degree(r["CP"]),
            degree(r["VP"]), degree(r["EP"]))


def config_key(c: dict) -> tuple:
    return (c["num_gpus"], c["global_batch_size"], c["micro_batch_size"], c["tensor_model_parallel_size"],
            c["pipeline_model_parallel_size"], c["context_parallel_size"],
            c["virtual_pipeline_model_parallel_size"] or 1, c["expert_model_parallel_size"] or 1)


def recipe(r: dict[str, str], known: list[dict]) -> dict[str, str]:
    """The recipe columns of one page row ({} where no config is looked for)."""
    if r["Model"] not in MODELS or r["task"] != "Pre-Training" or r["release"] not in RELEASE_TAGS:
        return {}
    found = [c for c in known if c["model"] == MODELS[r["Model"]] and c["gpu"] == r["System"].replace("DGX-", "")
             and c["precision"] == PRECISIONS.get(r.get("Precision", "")) and config_key(c) == layout_key(r)]
    if "FSDP" in r:
        found = [c for c in found if bool(c["use_megatron_fsdp"]) == (degree(r["FSDP"], 0) > 0)]
    own = [c for c in found if c["tag"] in RELEASE_TAGS[r["release"]]]
    pick = sorted(own or found, key=lambda c: ALL_TAGS.index(c["tag"]))
    if not pick:
        return {"recipe_match": "none"}
    # Where the matching configs of several tags disagree (26.04.01: v0.4.1 and v0.4.2), the
    # earliest is taken and the match says so.
    settings = {json.dumps({k: c.get(k) for k in KNOBS}, sort_keys=True) for c in pick}
    c = pick[0]
    out = {"recipe_match": ("release tag" if own else "other tag") + (", tags disagree" if len(settings) > 1 else ""),
           "recipe_config": f"{c['name']} ({c['file']} @{c['tag']})"}
    for k in KNOBS:
        v = c.get(k)
        out[k] = "" if v is None else (",".join(v) if isinstance(v, list) else str(v))
    return out


def main(repo: str) -> None:
    rows = split_two_value_cells([r for doc in DOCS for r in page_rows(git(repo, "show", f"{DOCS_COMMIT}:{doc}"))])
    known = configs(repo)
    source = f"NVIDIA-NeMo/Megatron-Bridge {' and '.join(DOCS)} @{DOCS_COMMIT}"
    writer = csv.DictWriter(sys.stdout, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        line = {"release": r["release"], "task": r["task"], "system": r["System"], "model": r["Model"],
                "precision": r.get("Precision", ""), "cell_value": r.get("cell_value", ""), "num_gpus": r["#-GPUs"],
                "gbs": r["GBS"], "mbs": r["MBS"], "seq_len": r["Sequence Length"], "fsdp": r.get("FSDP", ""),
                "tp": r["TP"], "pp": r["PP"], "cp": r["CP"], "vp": r["VP"], "ep": r["EP"], "ga": r.get("GA", ""),
                "tokens_per_s_per_gpu": r["Tokens / sec / GPU"], "model_tflops_per_gpu": r["Model TFLOP / sec / GPU"],
                "source": source}
        writer.writerow({k: "" for k in FIELDS} | line | recipe(r, known))


if __name__ == "__main__":
    main(sys.argv[1])
