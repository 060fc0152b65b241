"""Per-rank work on a Dask cluster (`--scheduler local:N` or `tcp://HOST:PORT`; `pip install 'tracekit[dask]'`).

What is naturally per rank runs on the workers, one task per trace file: reading and decoding, the rank's edges, its
analyses, its workbooks, its dataset partitions (`tasks.py`). What combines ranks runs where the small per-rank
results meet, in this process: rank rules (which file holds which rank), the cross-rank analyses (`scope: across
ranks`), ranks.xlsx, the diff (`runs.py`). The outputs are the bytes a run without a scheduler writes.

Nothing here is imported unless a scheduler is asked for; `scheduler.py` is the only module that imports Dask.
"""
