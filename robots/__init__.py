"""Bundled robot descriptions (installed as the data package ``grid_robots``); see README.md."""
