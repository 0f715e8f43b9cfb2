"""The paper-reproduction harness: Tables 2-5 beside the paper's numbers, placer comparisons, the demo.

Programs on top of :mod:`tfplace` used by ``run_experiments.py`` and ``make demo``; not part of the
installed plugin.
"""
