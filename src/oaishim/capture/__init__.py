"""Capture core: both sides of the wire, every piece with its time, in a store that survives a crash.

The record format and its migrations (``record``), redaction (``redact``), building a record from
what a recorder collected (``build``), the stream timeline (``timeline``), matching requests to
recorded answers (``playbook``), comparing answers (``diff``) and rendering (``render``), plus the
store that writes and reads the files (``store``, ``reader``, ``index``, ``files``). No sockets and
no event loop here: the gateway's recorder (``oaishim.server.recording``) builds on this package,
and the tools that serve or send over the network (proxy, mock, replay) are
:mod:`oaishim.capture_tools`, above the server.
"""

from oaishim.capture.reader import CaptureReader
from oaishim.capture.record import MIGRATIONS, VERSION, Record, RecordError, migrate
from oaishim.capture.redact import Redactor
from oaishim.capture.store import CaptureWriter

__all__ = ["MIGRATIONS", "VERSION", "CaptureReader", "CaptureWriter", "Record", "RecordError", "Redactor", "migrate"]
