"""Helpers the tests share: oracles computed from the raw JSON, invariants, category rules."""
