"""``lightning_fabric``, handed over to framework.

This folder is on the import path only under ``framework as-lightning``.
"""

from framework.as_lightning.aliases import take_over

take_over(__name__)
