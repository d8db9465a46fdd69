"""Parameters that must mean what they say on every backend (one module per parameter).

Each module reads what the client asked and what the backend's profile says about how it takes
that parameter, then either translates it into the backend's own switch, or marks it for the
gateway to honour itself on the response side, or refuses it as the official API would. None is
ever a silent no-op: what cannot be honoured is reported.
"""
