"""Calibration: measured runs, trainer-log import, fitting of efficiencies, held-out accuracy.

* ``measured``: the published runs in ``validation/`` as typed rows;
* ``log_import``: rows from Megatron, torchtitan and nanotron training logs;
* ``fit``: robust bounded fitting of a profile's efficiency parameters, k-fold held-out error;
* ``accuracy`` / ``accuracy_report``: prediction error on measured rows, as tables;
* ``validation``: the `autoplan validate` checks;
* ``profile_file``: calibrated profile files (``--profile``).
"""
