"""optimus_ir: split/cat (vertical) and replicated-op (horizontal) cleanups in Inductor IR."""
