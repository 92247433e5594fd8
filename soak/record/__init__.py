"""What a run leaves behind, and the models every reader uses: ``record.json``
(:mod:`.models`), ``snapshots.jsonl`` (:mod:`.snapshot`), their typed sections
(:mod:`.telemetry`, :mod:`.gpu_telemetry`, :mod:`.sections` on :mod:`.shape`) and published
JSON Schema (:mod:`.schema`), ``events.jsonl``
(:mod:`.events`), the journals' writers and readers (:mod:`.journal`), the load summary,
the faults timeline, the redaction layer and the damaged-directory loader.

The bottom floor of the headless core: it imports nothing from the rooms above it.
"""
