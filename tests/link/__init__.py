"""Tests of the link stage: every edge kind against the raw trace, and Execution Trace linking."""
