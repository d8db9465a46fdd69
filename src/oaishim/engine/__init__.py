"""The model side, and the only place that reads a model's files: the embedded llama.cpp server
(``llamacpp``, ``embedded``), the tiny models the project generates (``tinymodel``) and the special
tokens of a model folder (``tokens``).

Below the server and the probe (the gateway's configuration reads a model's special tokens through
``tokens``), above ``transform``, whose pure parsing it feeds. The engine extra's packages are
imported where used, so the package imports without them.
"""
