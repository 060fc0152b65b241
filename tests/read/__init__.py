"""Tests of the read stage: decoding, salvage, screening, datasets, fuzzed input."""
