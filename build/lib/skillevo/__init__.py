"""skillevo: evolve a family of agent skills one evidence-backed generation at a time."""

__version__ = "0.1.0"
