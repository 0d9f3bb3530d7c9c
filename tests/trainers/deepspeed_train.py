"""A DeepSpeed training script for the exported JSON (the ``TRAIN_SCRIPT`` of deepspeed_launch.sh).

Trains the Hugging Face model of ``MODEL_CONFIG`` (a config.json; the file autoplan planned, so
the shape is the plan's) from random weights on random tokens of ``SEQ_LEN`` (default the
config's ``max_position_embeddings``), ``train_micro_batch_size_per_gpu`` sequences per micro
step, for the JSON's ``scheduler.params.total_num_steps`` optimizer steps (the export's
``--train-steps``). Everything else is the JSON's, read by ``deepspeed.initialize``: ZeRO stage,
offload, bf16, optimizer, AutoEP (``expert_parallel``); ``activation_checkpointing`` in the JSON
turns on the model's gradient checkpointing (the export's note for ``recompute=full``).

On CPU: ``DS_ACCELERATOR=cpu`` and gloo (``DS_BACKEND``, default gloo). Rank 0 prints
``autoplan-train step N loss X`` per optimizer step; DeepSpeed's engine prints its own
``global_step=N, ... CurrSamplesPerSec=...`` line (``steps_per_print`` 1), which autoplan's log
import reads. Used by tests/trainers/test_cpu_trial_loop.py and docs/trial.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import deepspeed
import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deepspeed", action="store_true")
    parser.add_argument("--deepspeed_config", required=True)
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    with open(args.deepspeed_config, encoding="utf-8") as f:
        ds_config = json.load(f)
    with open(os.environ["MODEL_CONFIG"], encoding="utf-8") as f:
        fields = json.load(f)
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    seq_len = int(os.environ.get("SEQ_LEN") or config.max_position_embeddings)
    steps = int(ds_config["scheduler"]["params"]["total_num_steps"])

    deepspeed.init_distributed(dist_backend=os.environ.get("DS_BACKEND", "gloo"))
    rank = torch.distributed.get_rank()
    torch.manual_seed(1234)  # the same initial weights on every rank
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if "activation_checkpointing" in ds_config:
        model.gradient_checkpointing_enable()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)

    generator = torch.Generator().manual_seed(rank)  # each data-parallel rank its own tokens
    micro = int(ds_config["train_micro_batch_size_per_gpu"])
    for step in range(1, steps + 1):
        start_s = time.perf_counter()
        for _ in range(engine.gradient_accumulation_steps()):
            tokens = torch.randint(config.vocab_size, (micro, seq_len), generator=generator).to(engine.device)
            loss = engine(input_ids=tokens, labels=tokens).loss
            engine.backward(loss)
            engine.step()
        if rank == 0:
            value = float(loss.detach().float())
            print(f"autoplan-train step {step} loss {value:.4f} finite {math.isfinite(value)} "
                  f"step_time_s {time.perf_counter() - start_s:.4f}", flush=True)
    # Every rank leaves the process group before exit: a rank that exits with its gloo group
    # alive can abort in teardown ("terminate called without an active exception", SIGABRT),
    # failing a run whose steps all finished.
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
