"""An example third-party GRiD plugin: gravity compensation with a GPU emitter.

The algorithm lives in :mod:`grid_example_gravity.gravity_compensation`, which the
entry point ``gravity_compensation`` of the group ``grid`` names.
"""

__version__ = "0.1.0"
