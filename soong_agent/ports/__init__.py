"""Boundary vocabulary and port Protocols: the lowest layer, imported by every other layer."""
