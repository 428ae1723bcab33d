"""drillbook: output layers for neural language generation, and the book about them.

The book's "API reference" pages list the subpackages and everything in them.
"""

__version__ = "0.1.0"
