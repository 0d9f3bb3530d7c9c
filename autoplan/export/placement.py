"""Rank placement: whether a trainer's rank orders can express the plan's placement."""

from __future__ import annotations

from autoplan.layout import Layout


def effective_order(order: str, layout: Layout) -> tuple[str, ...]:
    """The rank order without dimensions of size 1 ('tp-cp-dp-pp' with cp = 1 -> tp, dp, pp)."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    return tuple(dim for dim in order.split("-") if sizes[dim] > 1)


def placement_warning(trainer_label: str, orders: dict[str, str], layout: Layout) -> str | None:
    """A warning when no order the trainer offers equals the plan's placement (or None)."""
    if matching_order(orders, layout) is not None:
        return None
    offered = ", ".join(orders.values())
    return (f"placement {layout.placement} (rank order, innermost first) cannot be expressed; "
            f"{trainer_label} orders ranks as {offered}; communication costs may differ from "
            "the prediction")


def matching_order(orders: dict[str, str], layout: Layout) -> str | None:
    """The key of the first trainer order equivalent to the plan's placement."""
    wanted = effective_order(layout.placement, layout)
    for key, order in orders.items():
        if effective_order(order, layout) == wanted:
            return key
    return None
