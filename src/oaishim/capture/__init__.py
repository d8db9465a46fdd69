"""Capture: both sides of the wire, every piece with its time, in a store that survives a crash.

The pure core — the record format and its migrations (``record``), redaction (``redact``),
building a record from what a recorder collected (``build``), the stream timeline (``timeline``),
matching requests to recorded answers (``playbook``), comparing answers (``diff``) and rendering
(``render``) — sits beside the shells that touch files (``store``, ``reader``) and sockets
(``proxy``, ``mock``, ``replay``; imported by name, not here: they build on ``oaishim.server``,
which records through this package).
"""

from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import MIGRATIONS, VERSION, Record, RecordError, migrate
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter

__all__ = ["MIGRATIONS", "VERSION", "CaptureReader", "CaptureWriter", "Record", "RecordError", "Redactor", "migrate"]
