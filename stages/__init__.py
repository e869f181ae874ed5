"""Stage scripts: one per DVC stage; each parses argv, calls the library and prints a summary."""
