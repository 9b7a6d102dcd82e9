"""Adapters: the glue between reef and one agent harness each (``pi``, ``claude_code``)."""
