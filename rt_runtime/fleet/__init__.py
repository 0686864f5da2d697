"""Fleet replay: many bags on Dask, a Parquet results store, regression gates and reports (docs/REPLAY.md).

``gates`` and ``report`` are pure; ``bags`` hashes files, ``store`` writes Parquet, ``cluster`` is
the only module that talks to Dask, and ``task.replay_bag`` is what a worker runs for one bag.
"""
