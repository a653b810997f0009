"""The ``framework`` command: ``framework launch`` (and, later, ``framework fit --config``)."""
