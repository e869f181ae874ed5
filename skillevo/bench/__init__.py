"""The bench: paired arms on pinned tasks, one sandboxed workspace per cell, hidden oracles."""
