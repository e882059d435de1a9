"""Algorithms for agl: Baseline, adapters, APO, local GRPO backend, VERL."""
