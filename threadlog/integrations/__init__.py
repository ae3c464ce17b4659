"""Drop-in storage for agent frameworks, over a threadlog store."""
