"""Pure rewrites between what clients send/receive and what backends understand/say.

Every stream transformer follows one convention: ``feed(piece) -> list[output]`` and
``flush() -> list[output]`` that hands back whatever was held. Nothing here does I/O.
"""
