"""nox session definitions, one module per package (imported by noxfile.py)."""
