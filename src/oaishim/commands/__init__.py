"""The ``oaishim`` command line, the top layer: thin shells that parse arguments, open files and
servers, and print; the work is in the packages below.

``main`` is the entry point and owns ``check`` and ``serve``; ``capture`` wires ``capture``,
``replay``, ``mock`` and ``inspect``; ``probe`` wires ``probe``. Nothing below imports this package.
"""
