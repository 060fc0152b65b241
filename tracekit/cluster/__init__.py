"""The Dask executor (`--scheduler local:N` or `tcp://HOST:PORT`; `pip install 'tracekit[dask]'`).

A command's plan is the same on every executor (`tracekit.pipeline.run_plan`): its per-rank tasks run on the
workers here, its cross-rank work in the command's process. Nothing here is imported unless a scheduler is asked
for; `scheduler.py` is the only module that imports Dask.
"""
