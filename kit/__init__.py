"""Reproducibility kit for the drift and SciML metamorphic-testing studies.

Importing the package loads nothing beyond the standard library, so that ``python -m
kit.runtime.venvs`` can build the tools environment from a bare interpreter.
"""

__version__ = "0.1.0"
