"""Example applications of Exactly; run each with `python -m examples.<name>` from the
repository root."""
