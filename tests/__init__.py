"""The test suite: oracles, ground truth and independent computation from the raw JSON, never the code's own output."""
