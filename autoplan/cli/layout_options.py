"""Options that describe one layout (estimate, explain, export, calibrate)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from autoplan.knobs import KNOBS, MAX_DEGREE, Knob


def _option(knob: Knob):
    """The one-layout option of ``knob`` (autoplan.knobs): its type, default and help."""
    if knob.kind == "flag":
        return click.option(f"{knob.flag}/--no-{knob.name.replace('_', '-')}", default=None, help=knob.help)
    kwargs: dict[str, Any] = {"default": knob.default, "show_default": knob.default is not None, "help": knob.help}
    if knob.kind == "choice":
        kwargs["type"] = click.Choice(knob.choices)
    elif knob.kind == "modules":
        kwargs.update(metavar="M1,M2", show_default=False)
    else:
        kwargs["type"] = click.IntRange(knob.minimum, 3 if knob.kind == "stage" else MAX_DEGREE)
    return click.option(knob.flag, **kwargs)


def layout_options(func: Callable) -> Callable:
    """The knobs of one layout (every entry of autoplan.knobs.KNOBS); unspecified ones take
    resolve_layout's defaults."""
    return functools.reduce(lambda f, opt: opt(f), reversed([_option(k) for k in KNOBS]), func)


LAYOUT_KEYS = tuple(k.name for k in KNOBS)


def layout_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The layout knobs given in ``kwargs`` (for :func:`autoplan.layout.resolve_layout`)."""
    return {k: kwargs[k] for k in LAYOUT_KEYS if kwargs.get(k) is not None}
