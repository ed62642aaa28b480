"""soniq 0.1.0's setting names: moved to `soniq.compat.settings`; this path keeps working."""

from soniq.compat.settings import (
    DEFAULT_ENV_FILE,
    LEGACY_SETTINGS,
    LegacySetting,
    UnknownSettingError,
    UnsupportedSettingError,
    read_env_file,
    translate,
    unknown_setting,
)

__all__ = [
    "DEFAULT_ENV_FILE",
    "LEGACY_SETTINGS",
    "LegacySetting",
    "UnknownSettingError",
    "UnsupportedSettingError",
    "read_env_file",
    "translate",
    "unknown_setting",
]
