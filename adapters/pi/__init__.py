"""The pi adapter: renderer for pi's agent dir, installer, ``reef-pi`` launcher, pi extension."""
