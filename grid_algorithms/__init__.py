"""Built-in algorithms, one module each, registered through entry points like any plugin."""
