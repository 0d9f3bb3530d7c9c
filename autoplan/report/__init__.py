"""Reporting: explain, why-not, compare, results files, plots and the HTML report."""
