"""Core: the rules every stage shares, written once so that no two stages can disagree about them.

A module belongs here when more than one stage (or the bench and a stage) must apply the same rule: what an
error means, how a file is read safely and a digest taken, what params, tasks, arms, models, results and the
sampling plan are. Core imports nothing of skillevo outside itself but the statistics (skillevo.stats), so the
engine, every stage library and every operator tool can depend on it and it on none of them
(tests/test_layout.py checks).
"""
