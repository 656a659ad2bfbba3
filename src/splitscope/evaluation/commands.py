"""CLI verbs of this layer (registered by splitscope.cli)."""

COMMANDS: list = []
