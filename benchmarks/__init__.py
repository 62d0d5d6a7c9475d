"""optimus_ir's benchmarks and probes: ``python -m benchmarks <command>`` (``python -m benchmarks --help`` lists them).

The workloads come from the registry the tests share, ``optimus_ir.testing``; the measurement helpers and the
results files from :mod:`benchmarks.measure`. One-off probes are in ``benchmarks/probes/``; results in
``benchmarks/results/<date>/``, kept out of git; ``benchmarks/RESULTS.md`` holds the current tables and
``benchmarks/results/HISTORY.md`` a short dated summary of what each session found.
"""
