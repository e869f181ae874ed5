"""The offline simulator: a deterministic Messages API server that plays the agent (see server.py)."""

from skillevo.simulator.agent import EscapeTargets
from skillevo.simulator.playbook import Playbook, load, load_all, load_dir
from skillevo.simulator.server import MODES, Simulator

__all__ = ["EscapeTargets", "MODES", "Playbook", "Simulator", "load", "load_all", "load_dir"]
