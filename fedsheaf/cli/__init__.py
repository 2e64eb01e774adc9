"""The ``fedsheaf`` command line: ``main`` dispatches; one module per command holds its
arguments and entry point (``run`` is in ``main``)."""
