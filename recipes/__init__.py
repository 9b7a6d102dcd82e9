"""Built-in learning recipes, one package each, loaded by name or ``package.module:Class``.

The recipe contract lives in ``reef_core``; nothing in ``reef_core`` imports this package.
"""
