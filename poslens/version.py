"""The package version, in a module of its own so that every layer can read it without importing the API.

Example:
    >>> from poslens.version import __version__
    >>> __version__.count(".")
    2
"""

__version__ = "0.1.0"
