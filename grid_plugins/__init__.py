"""Built-in plugins other than algorithms: robot loaders.

Each module is registered through its own entry point of the group ``grid`` in
our pyproject, exactly as a third-party plugin would be.
"""
