"""The file-handling base every layer stands on: reading and writing files safely (safefs), JSON and YAML
documents, digests, archives, the JSON Schemas of the files between stages, DVC's own files, and the errors that
name a file and a rule. It imports nothing of skillevo above it."""
