"""The spec foundation: a YAML file becomes a typed, checked :class:`~.model.Spec`, or every problem
in it is reported at its line and column (loader → schema → model → lint → validate)."""
