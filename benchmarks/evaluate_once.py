"""Evaluate one layout (70B, 512 GPUs, tp 4 pp 4 vpp 4 cp 2 ZeRO-1) N times: the driver of
``evaluate_instructions.sh``, which counts the instructions of one evaluate() under cachegrind."""

import gc
import sys

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout

training = build_training(512, 8192, 512)
ctx = build_context("70b", training)
layout = resolve_layout({"tp": 4, "pp": 4, "vpp": 4, "cp": 2, "zero": 1}, training)
evaluate(ctx, LayoutBatch.from_layouts([layout]))  # (context-only quantities computed once)
gc.disable()
for _ in range(int(sys.argv[1])):
    evaluate(ctx, LayoutBatch.from_layouts([layout]))
