"""The link stage: the dependency graph (`edges`) built from the read tables; Execution Trace nodes linked to events."""
