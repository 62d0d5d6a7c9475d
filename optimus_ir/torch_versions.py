"""The torch releases optimus_ir is checked against: its rules patch Inductor internals that change between
releases, so on any other release it stays off, with one warning, and every compile is stock Inductor's."""

from __future__ import annotations

__all__ = ["CHECKED", "unchecked_torch"]

#: the ``major.minor`` releases of torch whose Inductor the rules, the patches and the virtual device were checked
#: against (the tests, the golden files and the GPU runs)
CHECKED = ("2.11",)


def unchecked_torch() -> str | None:
    """The installed torch's version where it is not one of :data:`CHECKED`, else None."""
    import torch

    version = str(torch.__version__)
    return None if ".".join(version.split("+")[0].split(".")[:2]) in CHECKED else version
