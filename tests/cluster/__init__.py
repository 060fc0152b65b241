"""Tests of --scheduler: a local Dask cluster writes the bytes a run without it writes."""
