"""optimus_ir's benchmarks and probes: ``python -m benchmarks <command>`` (``python -m benchmarks --help`` lists them).

The workloads come from the registry the tests share, ``optimus_ir.testing``; the measurement helpers and the
results files from :mod:`benchmarks.measure`. One-off probes are in ``benchmarks/probes/``; results in
``benchmarks/results/<date>/`` (``HISTORY.md`` there says what each session found).
"""
