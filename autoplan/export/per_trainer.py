"""The best plan each trainer can run, for an export to several trainers (``search --export``).

A search ranks layouts with one trainer's profile and rules; another trainer may refuse its top
plan (nanotron has no ZeRO-3, torchtitan no model builder for an architecture). For each trainer
asked for, :func:`best_plans` takes the best plan that trainer can run:

* the searched trainer: the first plan of the search's own ranking that its exporter accepts;
* any other trainer: the same search (space, sampler, seed, stage option) run again with that
  trainer's profile and rules, so its plans are legal for it and its figures are predicted with
  its own profile; then the first plan its exporter accepts.

A trainer with no such plan gets the one-line reason instead (no feasible layout, or every ranked
plan refused by its exporter, with the first refusal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autoplan.errors import AutoplanError, NoFeasiblePlanError
from autoplan.export.common import ExportResult, LaunchOptions, Prediction

MAX_EXPORT_TRIES = 50  # ranked plans tried per trainer before giving up on its exporter
REPEATS_MEAN_MODEL = 3  # the same refusal for the 3 best plans: the model, not the layout, is refused


@dataclass(frozen=True)
class TrainerPlan:
    """One trainer's export: its plan (rank in its own ranking) and files, or why there is none."""

    trainer: str
    rank: int = 0
    record: dict[str, Any] | None = None
    prediction: Prediction | None = None
    result: ExportResult | None = None
    reason: str = ""

    @property
    def exported(self) -> bool:
        return self.result is not None

    def summary(self) -> str:
        """One line for the terminal."""
        if self.result is None:
            return f"{self.trainer}: no plan to export: {self.reason}"
        layout = self.record.get("layout", "") if self.record else ""
        predicted = f"; predicted {self.prediction.describe()}" if self.prediction else ""
        return f"{self.trainer}: plan {self.rank} of its ranking ({layout}){predicted}"


def best_plans(result: Any, trainers: Iterable[str], launch: LaunchOptions | None = None) -> list[TrainerPlan]:
    """For each trainer, its best plan that its exporter accepts (see the module docstring).

    ``result`` is a :class:`autoplan.search.SearchResult`; the other trainers' searches reuse its
    space and options (without storage: they are not written to the study).
    """
    searched = result.ctx.profile.name
    plans = []
    for trainer in trainers:
        try:
            own = result if trainer == searched else _search_for(result, trainer)
        except AutoplanError as exc:  # e.g. a setup the trainer cannot run (its FP8 recipes)
            plans.append(TrainerPlan(trainer, reason=str(exc)))
            continue
        plans.append(_first_exportable(own, trainer, launch or LaunchOptions()))
    return plans


def _search_for(result: Any, trainer: str) -> Any:
    from autoplan.api import build_context
    from autoplan.search import search

    ctx = build_context(result.ctx.model, result.training, trainer=trainer)
    options = dataclasses.replace(result.options, storage=None, study_name=None, workers=1)
    return search(ctx, result.space, options)


def _first_exportable(result: Any, trainer: str, launch: LaunchOptions) -> TrainerPlan:
    from autoplan.export import plan_training, render

    try:
        result.check_feasible()
    except NoFeasiblePlanError as exc:
        return TrainerPlan(trainer, reason=str(exc))
    rows = result.plan_rows(MAX_EXPORT_TRIES)
    refusals: list[str] = []
    for j, row in enumerate(rows):
        layout = result.table.batch.layout(int(row))
        training = plan_training(layout, result.training)
        columns = {name: values[row] for name, values in result.table.columns.items()}
        prediction = Prediction.from_record(columns, result.ctx.profile.name)
        try:
            files = render(trainer, result.ctx.model, layout, training,
                           dataclasses.replace(launch, prediction=prediction),
                           allow_uneven_pp=result.options.allow_uneven_pp, profile=result.ctx.profile)
        except AutoplanError as exc:  # a rule or the exporter refuses this plan: try the next
            refusals.append(str(exc))
            if refusals[:REPEATS_MEAN_MODEL] == [refusals[0]] * REPEATS_MEAN_MODEL:
                return TrainerPlan(trainer, reason=f"its exporter cannot build this model: {refusals[0]}")
            continue
        record = result.top_records(j + 1)[-1]
        record["layout"] = layout.describe()
        return TrainerPlan(trainer, rank=j + 1, record=record, prediction=prediction, result=files)
    return TrainerPlan(trainer, reason=f"its exporter refuses each of its best {len(rows)} feasible plans; "
                                       f"the best: {refusals[0]}")
