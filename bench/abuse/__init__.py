"""The cases and shared pieces of bench/abuse.py (see its docstring)."""
