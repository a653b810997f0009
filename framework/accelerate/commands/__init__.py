"""``accelerate.commands``' importable names; the commands themselves are ``framework launch`` and
``framework config``."""
