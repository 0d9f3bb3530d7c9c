"""Shared click parameter types and option decorators."""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from autoplan.errors import AutoplanError
from autoplan.units import UnitError, parse_count


class TokenCount(click.ParamType):
    """'4M' (binary: 4·2^20), '4194304' or '4e6' (literal)."""

    name = "TOKENS"

    def __init__(self, binary: bool = True):
        self.binary = binary

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return parse_count(value, binary=self.binary)
        except UnitError as exc:
            self.fail(str(exc), param, ctx)


class IntList(click.ParamType):
    """'8' or '4,8' -> a tuple of positive integers (a knob fixed or overridden by a list)."""

    name = "N[,N...]"

    def __init__(self, minimum: int = 1):
        self.minimum = minimum

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = []
        for part in str(value).split(","):
            part = part.strip()
            try:
                number = int(part)
            except ValueError:
                self.fail(f"expected integers like '4' or '4,8', got {value!r}", param, ctx)
            if number < self.minimum or number > 2**31:
                self.fail(f"values must lie in [{self.minimum}, 2^31], got {number}", param, ctx)
            items.append(number)
        return tuple(items)


class ChoiceList(click.ParamType):
    """'selective,full' -> ('selective', 'full'), each checked against ``choices``."""

    name = "CHOICE[,CHOICE...]"

    def __init__(self, choices: tuple[str, ...]):
        self.choices = choices

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = tuple(p.strip().lower() for p in str(value).split(",") if p.strip())
        for item in items:
            if item not in self.choices:
                self.fail(f"{item!r} is not one of {', '.join(self.choices)}", param, ctx)
        if not items:
            self.fail("expected at least one value", param, ctx)
        return items


def output_format_option(default: str = "table") -> Callable:
    return click.option("--format", "output_format", type=click.Choice(["table", "json", "csv"]),
                        default=default, show_default=True, help="Output format.")


def context_options(func: Callable) -> Callable:
    """--model, --gpus, --hardware, --trainer and cluster overrides, shared by many commands."""
    options = [
        click.option("--model", "-m", "model_name", required=True,
                     help="Model preset or alias (see `autoplan models`), or a config.json / YAML path."),
        click.option("--hardware", default="h100-sxm", show_default=True,
                     help="GPU preset (see `autoplan hardware`) or a YAML path."),
        click.option("--trainer", default="megatron", show_default=True,
                     help="Trainer profile: megatron, torchtitan, nanotron, deepspeed, hf."),
        click.option("--gpus-per-node", type=int, default=None, help="Override the GPUs per node."),
        click.option("--nic", "nic", default=None,
                     help="Override the NIC bandwidth per GPU per direction, e.g. '400 Gb/s'."),
        click.option("--profile", "profile_path", default=None, type=click.Path(dir_okay=False),
                     help="Calibrated profile YAML written by `autoplan calibrate`."),
        click.option("--flops-convention", type=click.Choice(["playbook", "causal", "megatron"]),
                     default="playbook", show_default=True,
                     help="How model FLOPs (for MFU) are counted; see docs/conventions.md."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def allow_uneven_option(func: Callable) -> Callable:
    """--allow-uneven-pp, with one meaning in search, estimate, explain, compare and export."""
    return click.option("--allow-uneven-pp", is_flag=True,
                        help="Allow layers not divisible by pp·vpp (unequal pipeline stages, extra "
                             "layers on early stages) for trainers that can run them.")(func)


def fail(message: str) -> None:
    """Raise a user error from CLI code."""
    raise AutoplanError(message)
