"""The capture tools that touch sockets, built on :mod:`oaishim.server`: the logging proxy
(``proxy``, behind ``oaishim capture``), the mock backend (``mock``, behind ``oaishim mock``) and
the replayer (``replay``, behind ``oaishim replay``).

They sit above the server (they reuse its ASGI helpers, upstream pool and recorder) and below the
command line; the record format, redaction and the store they work on are :mod:`oaishim.capture`,
which sits below the server, so the gateway records through it without importing these.
"""
