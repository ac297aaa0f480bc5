"""Example harnesses, shipped with the shim so a spec can name them from anywhere."""
