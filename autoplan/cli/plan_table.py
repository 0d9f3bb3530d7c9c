"""The ranked plans of a search as a terminal table: each plan's layout, memory, batch, step time,
tokens/s with its error band, MFU, bubble and exposed communication."""

from __future__ import annotations

COST_COLUMNS = ("train_days", "gpu_hours", "cost_usd")


def describe(layout) -> str:
    """``Layout.describe()`` plus the placement when it is not the default one."""
    from autoplan.layout import DEFAULT_PLACEMENT

    extra = f" {layout.placement}" if layout.placement != DEFAULT_PLACEMENT else ""
    return layout.describe() + extra


BATCH_HEADERS = ("batch seqs\n(tokens)", "µs per\ntoken")


def batch_cells(table, row: int) -> tuple[str, str]:
    """A plan's own global batch ('504 (3.94M)': sequences, tokens in binary millions as
    --gbs-tokens counts them) and its step time per token of that batch, in microseconds."""
    seqs = int(table.batch.gbs_seqs[row])
    return (f"{seqs:,} ({table['gbs_tokens'][row] / 2**20:.2f}M)",
            f"{1e6 * table['step_time_per_token_s'][row]:.3f}")


def idle_note(table, row: int) -> str:
    """' (488 GPUs idle)' for a plan that leaves GPUs of the job idle (--allow-idle-gpus)."""
    idle = table.columns.get("idle_gpus")
    return f" ({int(idle[row])} GPUs idle)" if idle is not None and idle[row] else ""


def twins_note(result, row: int) -> str:
    """The plans predicted the same as row ``row``, folded into it: '\n= cp=2 dp=8 mbs=2'."""
    variants = result.variants[row]
    return f"\n= {variants}" if variants else ""


def print_table(result, top_k: int, costs=None) -> None:
    """The recipe line and a table of the best plans on stdout: drawn by rich on a terminal, as
    the same text without rich where stdout is a file or a pipe (:mod:`autoplan.cli.text_table`)."""
    import sys

    from autoplan.cli.text_table import is_plain_stream, plain_line, render_table, rich_table
    from autoplan.report.results import recipe_line

    recipe = recipe_line(result)
    rows = result.plan_rows(top_k)
    title, columns, cells = plan_cells(result, rows, costs) if len(rows) else ("", [], [])
    if is_plain_stream(sys.stdout):
        line = plain_line(recipe, NON_TERMINAL_WIDTH)
        text = render_table(title, columns, cells, NON_TERMINAL_WIDTH) if len(rows) else ""
        if line is not None and text is not None:
            sys.stdout.write(line + text)
            sys.stdout.flush()
            return
    from autoplan.cli.render import stdout_console

    console = stdout_console(highlight=False)
    if not console.is_terminal:
        console = stdout_console(highlight=False, width=NON_TERMINAL_WIDTH)
    console.print(recipe)
    if len(rows):
        console.print(rich_table(title, columns, cells, no_wrap=[c.header != "layout" for c in columns]))


NON_TERMINAL_WIDTH = 160  # the table's width where stdout is not a terminal


def plan_cells(result, rows, costs=None):
    """(title, columns, cell texts) of the table of the plans in ``rows``."""
    from autoplan.calibration.uncertainty import band_text
    from autoplan.cli.text_table import TextColumn
    import numpy as np

    from autoplan.report.near_ties import result_band
    from autoplan.search.ranking import ROBUST_MARK
    from autoplan.units import format_time

    title = "Pareto front: throughput vs memory headroom" if result.sampler == "nsga2" else "Best plans"
    title = (f"{title} ({result.ctx.model.name}, {result.training.gpus} x "
             f"{result.ctx.cluster.gpu.name}, {result.ctx.profile.name})")
    band = result_band(result)
    band_suffix = band_text(band.tokens_low_factor, band.tokens_high_factor)  # '1,183 ±9%'
    cost_names = [c for c in COST_COLUMNS if costs is not None and c in costs]
    headers = {"train_days": "days", "gpu_hours": "GPU-hours", "cost_usd": "USD"}
    # Numbers never wrap; a narrow terminal wraps the layout column instead.
    columns = [TextColumn("rank", "right"), TextColumn("layout", min_width=24)]
    columns += [TextColumn(name, "right") for name in (
        "peak GiB\n(room)", *BATCH_HEADERS, "step", _tokens_header(band), "MFU", "bubble",
        "exposed\ncomm", *[headers[c] for c in cost_names])]
    col = result.table.columns
    moved = col.get("robust_moved", np.zeros(len(result.table), dtype=bool))
    cells = []
    for j, row in enumerate(rows):
        extra = [f"{costs[c].iloc[j]:,.1f}" if c == "train_days" else f"{costs[c].iloc[j]:,.0f}"
                 for c in cost_names]
        cells.append([f"{result.ranks[row]}{ROBUST_MARK if moved[row] else ''}", describe(result.table.batch.layout(int(row)))
                      + idle_note(result.table, int(row)) + twins_note(result, int(row)),
                      f"{col['peak_memory_gib'][row]:.1f} ({col['memory_headroom_gib'][row]:+.1f})",
                      *batch_cells(result.table, int(row)),
                      format_time(col["step_time_s"][row]), f"{col['tokens_per_s_per_gpu'][row]:,.0f} {band_suffix}",
                      f"{100 * col['mfu'][row]:.1f}%", f"{100 * col['bubble_fraction'][row]:.1f}%",
                      f"{100 * col['exposed_comm_fraction'][row]:.1f}%", *extra])
    return title, columns, cells


def _tokens_header(band) -> str:
    """The tokens/s column header, marked when the band's pair was never measured."""
    return "tokens/s\n/GPU" + ("" if band.measured else "\n(unmeasured pair)")
