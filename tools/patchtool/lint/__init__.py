"""`lint` (lint.py): series/patch consistency, trailers, tripwire tests, path safety, gitlink pins."""
