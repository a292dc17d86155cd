"""Generated protocol code. Do not edit: run `python proto/generate.py`."""
