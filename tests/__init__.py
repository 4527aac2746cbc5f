"""The test suites' shared Python: harness.py (real processes on loopback ports),
tools/ (fixture and oracle generators).  Imported as `tests.*` from the
repository root (scripts/deps.sh puts the root on the venv's path)."""
