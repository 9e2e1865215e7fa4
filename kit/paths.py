"""Where the kit lives and where it caches: the one definition of each.

    ROOT        the repository (the folder holding ``kit/``)
    cache_dir   runtime environments, trained models and fetched assets
                (``KIT_CACHE`` overrides ``<repo>/.kit``)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """Where runtime environments live (``KIT_CACHE`` overrides ``<repo>/.kit``)."""
    return Path(os.environ.get("KIT_CACHE", ROOT / ".kit"))
