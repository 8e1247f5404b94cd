"""Where PocketLLM keeps user files: platformdirs locations, overridable by environment variables (tests)."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "pocketllm"


def data_dir() -> Path:
    """Conversations and input history; POCKET_DATA_DIR overrides."""
    return _dir("POCKET_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """The user's models.toml; POCKET_CONFIG_DIR overrides."""
    return _dir("POCKET_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def models_dir() -> Path:
    """Models fetched by `pocket pull`; POCKET_MODELS_DIR overrides."""
    return _dir("POCKET_MODELS_DIR", str(data_dir() / "models"))


def cache_dir() -> Path:
    """Files that can be made again (regrouped weights); POCKET_CACHE_DIR overrides."""
    return _dir("POCKET_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def run_layout_dir() -> Path:
    """The CPU kernels' regrouped weights, kept between runs (kernels_numba/cpu/matvec/run_layout_store.py)."""
    return cache_dir() / "run_layout"


def conversations_dir() -> Path:
    return data_dir() / "conversations"


def history_file() -> Path:
    return data_dir() / "chat_history"


def user_registry_path() -> Path:
    return config_dir() / "models.toml"


def _dir(env_var: str, default: str) -> Path:
    return Path(os.environ.get(env_var) or default).expanduser()
