"""``python -m reef_cli`` is ``reef``."""

from reef_cli.main import run

run()
