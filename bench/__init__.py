"""The benchmarks (`make bench-NAME` runs `python -m bench.NAME`); common.py and
client.py are their shared pieces."""
