"""Glue for web frameworks; each module imports nothing of its framework."""
