"""Runners, agents and the Trainer of agl."""
