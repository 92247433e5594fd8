"""The Xid catalogue: what each NVIDIA Xid that matters in inference means, and how bad.

One table and one wording for every path that reports an Xid — NVML's event set, a DCGM
exporter's ``DCGM_FI_DEV_XID_ERRORS``, and ``NVRM: Xid`` lines in a followed server log —
so the live pane, the record and the report say the same words for the same fault.
"""

from __future__ import annotations

XID_MEANING: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault (illegal memory access)",
    43: "channel stopped after an application fault",
    45: "preemptive cleanup after a fault",
    48: "double-bit ECC error",
    63: "row remap recorded",
    64: "row remap failed",
    74: "NVLink error",
    79: "GPU fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP timeout (GPU reset needed)",
    120: "GSP error (GPU reset needed)",
}
"""Xids that matter in inference (ENGINE_FACTS.md)."""

XID_UNKNOWN = "not in soaktop's Xid table (see NVIDIA's Xid catalogue)"
"""The words for an Xid soaktop has none for, on every path (NVML, DCGM, server log)."""


def xid_meaning(xid: int, exporter_words: str | None = None) -> str:
    """Words for an Xid: soaktop's table first, then a DCGM exporter's own ``err_msg``,
    else :data:`XID_UNKNOWN`. The one place every source words an Xid."""
    if xid in XID_MEANING:
        return XID_MEANING[xid]
    return exporter_words or XID_UNKNOWN


XID_ERROR_ONLY = frozenset({13, 31, 43, 45, 63, 92, 94})
"""Faults of one application, or events the driver recorded and contained: ``error``.
Any other Xid means the GPU itself needs attention: ``critical``."""
