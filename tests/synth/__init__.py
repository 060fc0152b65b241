"""Tests of the synthetic traces and their ground truth."""
