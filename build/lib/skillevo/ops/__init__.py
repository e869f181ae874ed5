"""Ops: the operator's tools, each run as `python -m skillevo.ops.<name>` (mostly by a `make` target).

They act on a whole checkout between or around `dvc repro` (several generations, DVC's cache, the cell store's
remote, plots, the family's modes), so no pipeline stage runs them and none of their code is in a stage's
dependencies or the harness digest: changing a tool never re-runs a paid stage. They may use everything
below them; nothing imports them (tests/test_layout.py checks the direction).
"""
