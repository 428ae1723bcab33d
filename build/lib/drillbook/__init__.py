"""drillbook: output layers for neural language generation, and the book about them.

Subpackages:
    heads     interchangeable output layers behind one interface (``build_head``)
    analysis  rank and spectra of log-probability matrices, synthetic languages
    runtime   seeds, devices, the small/t4/full profile switch
    notebook  the first cell of every chapter
"""

__version__ = "0.1.0"
