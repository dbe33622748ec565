"""What each NVIDIA Xid error means and how bad it is: shared by ``doctor`` and the monitoring report.

Source: NVIDIA's "Xid Errors" catalog, https://docs.nvidia.com/deploy/xid-errors/ .
"""

from __future__ import annotations

# Xid → (severity, meaning) from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors).
# "fail": the GPU needs a reset/reboot or replacement; "warn": usually the application's fault.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("warn", "graphics engine exception (often an application out-of-range access)"),
    31: ("warn", "GPU memory page fault (application or driver bug)"),
    43: ("warn", "GPU stopped processing (application fault)"),
    45: ("warn", "preemptive cleanup: a process was killed while using the GPU"),
    48: ("fail", "double-bit ECC error"),
    61: ("fail", "internal micro-controller breakpoint/warning"),
    62: ("fail", "internal micro-controller halt"),
    63: ("warn", "ECC page retirement or row remapping recorded: reset the GPU to apply it"),
    64: ("fail", "ECC page retirement or row remapping failed"),
    74: ("fail", "NVLink error"),
    79: ("fail", "GPU has fallen off the bus"),
    92: ("warn", "high single-bit ECC error rate"),
    94: ("warn", "contained ECC error: the affected application must restart"),
    95: ("fail", "uncontained ECC error: reset the GPU"),
    119: ("fail", "GSP RPC timeout"),
    120: ("fail", "GSP error"),
}


def xid_meaning(code: int) -> str:
    """The catalog's meaning of ``code``, or a pointer to the catalog when gpuwise has none."""
    return XID_MEANINGS.get(code, ("warn", "see NVIDIA's Xid catalog"))[1]
