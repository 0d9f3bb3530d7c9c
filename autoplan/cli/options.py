"""Shared click parameter types and option decorators."""

from __future__ import annotations

import functools
from collections.abc import Callable

import click

from autoplan.errors import AutoplanError, escape, shown
from autoplan.layout import MAX_DEGREE
from autoplan.profiles import builtin_trainer_names
from autoplan.specs.training import (
    DEFAULT_FLOPS_CONVENTION,
    DEFAULT_GBS_TOLERANCE,
    FLOPS_CONVENTIONS,
    MAX_GBS_SEQS,
    MAX_GPUS,
    MAX_SEQ_LEN,
    SETTING_FIELDS,
    SETTINGS,
    Setting,
)
from autoplan.units import UnitError, parse_bandwidth, parse_count

MAX_SEED = 2**32 - 1  # numpy's and Optuna's seeds are unsigned 32-bit
SEED = click.IntRange(0, MAX_SEED)


class Bandwidth(click.ParamType):
    """'400 Gb/s' or '50 GB/s per direction', checked when parsed; the text is kept."""

    name = "BANDWIDTH"

    def convert(self, value, param, ctx):
        try:
            parse_bandwidth(value)
        except UnitError as exc:
            self.fail(str(exc), param, ctx)
        return value


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


class SeqLen(click.ParamType):
    """A sequence length: '8192', or with a binary suffix as --gbs-tokens reads one ('8k' = 8192,
    '128K' = 131072); a whole number of tokens from 1 to MAX_SEQ_LEN."""

    name = "TOKENS"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            tokens = float(value)
        else:
            try:
                tokens = parse_count(value, binary=True, what="a sequence length")
            except UnitError as exc:
                self.fail(str(exc), param, ctx)
        if tokens != int(tokens) or not 1 <= tokens <= MAX_SEQ_LEN:
            self.fail(f"a sequence length is a whole number of tokens from 1 to {MAX_SEQ_LEN:,}, got {value}", param, ctx)
        return int(tokens)


class LayoutText(click.ParamType):
    """'tp=8,pp=2,mbs=1,gbs_seqs=512' -> {'tp': '8', ...} (fields of a layout, checked later)."""

    name = "KEY=VALUE[,...]"

    def convert(self, value, param, ctx):
        import difflib

        from autoplan.layout import RECORD_FIELDS as FIELDS

        if isinstance(value, dict):
            return value
        out = {}
        for part in str(value).split(","):
            if not part.strip():
                continue
            key, eq, text = part.partition("=")
            key = key.strip().lower().replace("-", "_")
            if not eq or not text.strip():
                self.fail(f"expected key=value pairs like 'tp=8,pp=2', got {part.strip()!r}", param, ctx)
            if key not in FIELDS:
                close = difflib.get_close_matches(key, FIELDS, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.fail(f"unknown layout field '{key}'{hint}; valid: {', '.join(FIELDS)}", param, ctx)
            out[key] = text.strip()
        return out


class IntList(click.ParamType):
    """'8' or '4,8' -> a tuple of positive integers (a knob fixed or overridden by a list)."""

    name = "N[,N...]"

    def __init__(self, minimum: int = 1, maximum: int = MAX_DEGREE):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = []
        for part in str(value).split(","):
            part = part.strip()
            try:
                number = int(part)
            except ValueError:
                self.fail(f"expected integers like '4' or '4,8', got {shown(value)}", param, ctx)
            if number < self.minimum or number > self.maximum:
                self.fail(f"values must lie in [{self.minimum}, {self.maximum}], got {shown(number)}", param, ctx)
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


class HiddenAliasOption(click.Option):
    """An option whose ``hidden_aliases`` work on the command line but stay out of ``--help``
    (old spellings kept so old command lines still run)."""

    def __init__(self, *args, hidden_aliases: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.hidden_aliases = hidden_aliases

    def get_help_record(self, ctx):
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def setup_settings(kw: dict) -> dict:
    """The trainer settings of the setup (TrainingSpec fields) from the --attention-kernel,
    --fp8-recipe, --fp8-param-gather, --grad-reduce-in-bf16, --shard-gradients, --optimizer-state-dtype,
    --master-weights, --moe-capacity-factor and
    --mtp-in-mfu options."""
    return {name: kw[name] for name in SETUP_SETTINGS if name in kw}


SETUP_SETTINGS = SETTING_FIELDS


def _setting_option(setting: Setting):
    """The command-line option of a setup setting (autoplan.specs.training.SETTINGS)."""
    if setting.negatable:
        negative = "--no-" + setting.flag.removeprefix("--")
        return click.option(f"{setting.flag}/{negative}", setting.name, default=setting.default, show_default=True,
                            help=setting.help)
    if isinstance(setting.default, bool):
        return click.option(setting.flag, setting.name, is_flag=True, help=setting.help)
    if not setting.choices:  # a positive number, or None
        return click.option(setting.flag, setting.name, type=click.FloatRange(0.0, min_open=True), default=None,
                            help=setting.help)
    return click.option(setting.flag, setting.name, type=click.Choice(list(setting.choices)), default=setting.default,
                        show_default=True, help=setting.help)


SETUP_SETTING_OPTIONS = [_setting_option(setting) for setting in SETTINGS]


def training_options(func: Callable | None = None, *, model_required: bool = True,
                     gpus_required: bool = True, settings: bool = True) -> Callable:
    """The model, the cluster and the training setup, spelled the same on every command:
    --model/-m, --gpus/-g, --hardware, --gpus-per-node, --nic, --seq-len, --gbs-seqs,
    --gbs-tokens, --gbs-tolerance, --flops-convention, and (``settings``) the SETUP_SETTING_OPTIONS.
    ``gpus_required=False`` (compare, export) lets a file give the GPU count and the batch
    instead (``model_required=False``: the model too). Build the setup with
    :func:`training_from_options`."""
    if func is None:
        return functools.partial(training_options, model_required=model_required, gpus_required=gpus_required,
                                 settings=settings)
    options = [
        click.option("--model", "-m", "model_name", required=model_required,
                     help="Model preset or alias (see `autoplan models`), or a config.json / YAML path."),
        click.option("--gpus", "-g", "-n", "gpus", cls=HiddenAliasOption, hidden_aliases=("-n",),
                     type=click.IntRange(1, MAX_GPUS), required=gpus_required, default=None, help="Number of GPUs."),
        click.option("--hardware", default="h100-sxm", show_default=True,
                     help="GPU preset (see `autoplan hardware`) or a YAML path."),
        click.option("--gpus-per-node", type=click.IntRange(1, MAX_GPUS), default=None,
                     help="Override the GPUs per node (processes per node in exported launch lines)."),
        click.option("--nic", "nic", type=Bandwidth(), default=None,
                     help="Override the NIC bandwidth per GPU per direction, e.g. '400 Gb/s'."),
        click.option("--seq-len", type=SeqLen(), default=None,
                     help="Training sequence length, e.g. 8192 or 8k (binary: 8·1024) [default: the model's]."),
        click.option("--gbs-seqs", type=click.IntRange(1, MAX_GBS_SEQS), default=None,
                     help="Global batch size in sequences."),
        click.option("--gbs-tokens", type=TokenCount(), default=None,
                     help="Global batch size in tokens, e.g. 4M (= 4·2^20, binary suffixes)."),
        click.option("--gbs-tolerance", type=click.FloatRange(0.0, 1.0, max_open=True),
                     default=DEFAULT_GBS_TOLERANCE, show_default=True,
                     help="Accept the nearest global batch within this fraction of the target "
                          "(0 = exactly the batch asked for)."),
        click.option("--flops-convention", type=click.Choice(FLOPS_CONVENTIONS),
                     default=DEFAULT_FLOPS_CONVENTION, show_default=True,
                     help="How model FLOPs (for MFU) are counted; see docs/conventions.md."),
        *(SETUP_SETTING_OPTIONS if settings else []),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def launch_options(func: Callable) -> Callable:
    """--launcher and --checkpoint-dir: how the exported launch script starts the trainer and where
    the run saves, the same for `export` and `search --export` (autoplan.export.LaunchOptions)."""
    options = [
        click.option("--launcher", type=click.Choice(("torchrun", "slurm")), default="torchrun", show_default=True,
                     help="Launch script kind: torchrun on each node, or an sbatch script (srun + torchrun "
                          "c10d rendezvous)."),
        click.option("--checkpoint-dir", default=None, metavar="DIR",
                     help="Folder the trainer saves checkpoints in (every --train-steps steps) and resumes from "
                          "[default: none saved; nanotron, which needs one, then requires CHECKPOINT_DIR at launch]."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def allow_uneven_option(func: Callable) -> Callable:
    """--even-stages-only (the keyword ``allow_uneven_pp`` is its negation), with one meaning in
    search, estimate, explain, compare and export. Uneven stages are legal by default wherever
    the trainer can run them; ``--allow-uneven-pp``, the old opt-in, stays a hidden no-op so that
    old command lines still work."""
    func = click.option("--allow-uneven-pp", is_flag=True, hidden=True, expose_value=False,
                        help="Accepted for old command lines; uneven stages are the default.")(func)
    return click.option("--even-stages-only", "allow_uneven_pp", flag_value=False, default=True,
                        help="Only layers that divide into pp·vpp equal stages (by default, unequal "
                             "stages are allowed where the trainer can run them, extra layers on "
                             "early stages).")(func)


def trainer_options(func: Callable) -> Callable:
    """--trainer and --profile: whose implementation the cost model predicts."""
    options = [
        click.option("--trainer", default="megatron", show_default=True,
                     help=f"Trainer profile: {', '.join(builtin_trainer_names())}."),
        click.option("--profile", "profile_path", default=None, type=click.Path(dir_okay=False),
                     help="Calibrated profile YAML written by `autoplan calibrate`."),
        click.option("--trainer-version", default=None,
                     help="Trainer version whose capabilities apply, as its profile names it (megatron: "
                          "core_v0.15.3, core_v0.16.0, core_v0.17.0) [default: the pinned one]."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def training_from_options(kw: dict, model_seq_len: int, **overrides):
    """The ``TrainingSpec`` of the options in ``kw`` (``overrides`` replace option values, e.g.
    the gpus of a plan file); the sequence length defaults to the model's."""
    from autoplan.api import build_training
    from autoplan.specs.training import resolve_batch

    kw = {**kw, **overrides}
    if kw.get("gpus") is None:
        raise AutoplanError("the GPU count is missing: give --gpus (-g)")
    seq_len, gbs_seqs = resolve_batch(kw["seq_len"], kw["gbs_seqs"], kw["gbs_tokens"], model_seq_len)
    training = build_training(kw["gpus"], seq_len, gbs_seqs, hardware=kw["hardware"],
                              gpus_per_node=kw["gpus_per_node"], nic=kw["nic"], gbs_tolerance=kw["gbs_tolerance"],
                              flops_convention=kw["flops_convention"], **setup_settings(kw))
    note_alias("hardware", str(kw["hardware"]), training.cluster.gpu.name)
    return training


def profile_band_note(ctx) -> str:
    """What the band of a ``--profile`` run is: the calibration's own (its file's ``band:``,
    ``calibration.own_band``) or, for a file without one, the shipped profiles'."""
    own = ctx.profile.own_bands.get(ctx.cluster.gpu.name)
    if own is not None:
        return (f"the error band is your --profile's: the prediction interval of its {own['rows']} "
                "cross-validated runs (autoplan calibrate)")
    return ("the error bands are the shipped profiles' (error_bands.yaml), not your --profile's: it has no band "
            "(fewer than 5 cross-validated runs; its held-out error is what `autoplan calibrate` printed, "
            "unguarded where it had too few rows to cross-validate)")


def note_alias(what: str, given: str, name: str) -> None:
    """One line on stderr when a preset was named by an alias ('h100' is h100-sxm): the figures
    are that preset's."""
    if given.strip().lower() == name.lower() or "/" in given or given.lower().endswith((".yaml", ".yml", ".json")):
        return
    click.echo(f"note: --{what} {escape(given)} is the preset {name}", err=True)


def context_from_options(kw: dict):
    """The ``CostContext`` of the training and trainer options in ``kw``."""
    from autoplan.api import build_context
    from autoplan.specs.models import load_model

    model = load_model(kw["model_name"])
    training = training_from_options(kw, model.seq_len)
    note_model_file(kw, model, training.seq_len)
    return build_context(model, training, trainer=kw["trainer"], profile_path=kw["profile_path"],
                         trainer_version=kw.get("trainer_version"))


def note_model_file(kw: dict, model, seq_len: int) -> None:
    """One line on stderr when ``-m`` named a file: what was imported and the sequence length
    used (the preset's documented values need no note)."""
    from autoplan.cost.params import count_params
    from autoplan.specs.hf_config import DEFAULT_SEQ_LEN
    from autoplan.specs.models import is_preset
    from autoplan.units import format_count

    if is_preset(kw["model_name"]):
        return
    params = count_params(model)
    active = f" ({format_count(params.active)} active)" if params.active != params.total else ""
    how = ("--seq-len" if kw.get("seq_len") is not None else
           f"assumed: the config's seq_len, else min({DEFAULT_SEQ_LEN}, max_position_embeddings "
           f"{model.max_position_embeddings}); set --seq-len to change")
    click.echo(f"model '{model.name}' from {escape(kw['model_name'])}: {format_count(params.total)} parameters"
               f"{active}, sequence length {seq_len} ({how})", err=True)


def fail(message: str) -> None:
    """Raise a user error from CLI code."""
    raise AutoplanError(message)
