"""The gateway's network shell: the only place in oaishim that does network I/O."""
