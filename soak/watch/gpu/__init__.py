"""GPU telemetry in one room: the NVML source (:mod:`.nvml`, its faults in
:mod:`.nvml_faults`, its blocking calls off the loop through :mod:`.threads`), the DCGM
exporter source (:mod:`.dcgm`), the ledger that merges what either saw per GPU
(:mod:`.ledger`) and the choice of sources for a run (:mod:`.sources`). What a source
reads is :class:`probes.gpu_reading.GpuReading`; the Xid catalogue is :mod:`probes.xid`,
shared with the server-log reader.
"""
