"""``accelerate.commands.config``'s importable names."""
