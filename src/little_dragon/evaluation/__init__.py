"""Sealed-set evaluation: attempts, metrics, baselines at equal budget, comparison, report, promotion gate.

The only code besides the datasets build and its quality gate that reads the sealed set
(``datasets.guard.read_sealed`` refuses every other caller).
"""
