"""Legality of layouts per trainer, vectorised (used by search, estimate, explain, compare, export)."""
