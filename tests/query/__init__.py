"""Tests of the query stage: the catalog, the analyses against oracles, the step scoper, the stage order."""
