"""The Claude Code adapter: renderer, installer, ``reef-claude`` launcher, commands and hooks."""
