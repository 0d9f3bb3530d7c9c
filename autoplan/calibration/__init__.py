"""Calibration: measured runs, trainer-log import, fitting of efficiencies, held-out accuracy.

* ``rows``: a measured run as a typed row, and the cost context it is predicted in;
* ``validation``: the published runs in ``validation/`` as rows, one loader per reference file;
* ``measured``: a user's measured runs (MEASURED.csv) as rows, and the calibrated profile;
* ``log_import``: rows from Megatron(-Bridge), torchtitan, nanotron and DeepSpeed training logs;
* ``fit``: robust bounded fitting of a profile's efficiency parameters, k-fold held-out error;
* ``accuracy`` / ``accuracy_report``: prediction error on measured rows, as tables (`autoplan validate`);
* ``profile_file``: calibrated profile files (``--profile``).
"""

# The sections of `autoplan validate` (``accuracy_report``), in their order; the ones that refit
# parameters (minutes each) run only under ``--full``.
SECTIONS = ("rows", "loso", "memory", "memory-unit", "time", "intervals", "ranking", "sweep-refit", "golden")
REFIT_SECTIONS = ("memory-unit", "sweep-refit")
