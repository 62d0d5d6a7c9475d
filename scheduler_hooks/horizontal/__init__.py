"""Horizontal merges: see :mod:`optimus_ir.scheduler_hooks.horizontal.rule`."""
