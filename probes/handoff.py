"""Parsing a scraped page away from the caller's event loop: what can go wrong there.

``probes`` fetches pages and maps them to samples; where the mapping runs is the caller's
choice (``soak.watch.parse_worker`` runs it in a helper process so the measuring loop never
parses). A parse the helper could not do is not the server's fault, and says so.
"""

from __future__ import annotations


class ParseUnavailable(RuntimeError):
    """The off-loop parser could not parse a page (it died, hung, or was given up); the
    message is a sentence for the sample's ``error`` and the coverage's why."""
