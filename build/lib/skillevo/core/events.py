"""The session events more than one module reads: the usage fields the API reports (the CLI's stream, the relay
that meters the API, the results reader) and the harness's own event for a session it stopped. Kept apart from
skillevo.agent so that the gate's readers do not depend on the sandbox and the CLI.
"""

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
STOPPED = "skillevo_stopped"  # written by agent.session, read back by results.transcript_totals
