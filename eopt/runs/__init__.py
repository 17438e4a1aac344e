"""Runs of work: sweeps, repeated measurement, run sets, statistics and comparison."""
