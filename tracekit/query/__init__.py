"""The query stage: analyses in dependency order, `TraceDatabase` (SQL over traces or a dataset), the step scoper."""
