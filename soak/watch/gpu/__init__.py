"""GPU telemetry in one room: the NVML source (:mod:`.nvml`), the DCGM exporter source
(:mod:`.dcgm`), the ledger that merges what either saw per GPU (:mod:`.ledger`) and the
choice of sources for a run (:mod:`.sources`). The Xid catalogue is
:mod:`probes.xid`, shared with the server-log reader.
"""
