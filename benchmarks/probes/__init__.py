"""One-off probes: each answers one question about optimus_ir on a GPU (or, ``decisions`` and ``host-parts``, on any
machine). ``python -m benchmarks --help`` lists their commands."""
