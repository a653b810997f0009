"""``accelerate.commands.config.default.write_basic_config``: a launch config for this machine."""

from framework.accelerate.utils.environment import default_config_path, write_basic_config

__all__ = ["default_config_path", "write_basic_config"]
