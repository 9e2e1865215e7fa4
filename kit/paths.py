"""Where the kit lives and where it caches: the one definition of each.

    ROOT        the repository (the folder holding ``kit/``); ``KIT_ROOT`` names it for a
                kit installed from a wheel, whose own files are not a checkout
    cache_dir   runtime environments, trained models and fetched assets
                (``KIT_CACHE`` overrides ``<repo>/.kit``)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ["KIT_ROOT"]).resolve() if os.environ.get("KIT_ROOT") \
    else Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """Where runtime environments live (``KIT_CACHE`` overrides ``<repo>/.kit``)."""
    return Path(os.environ.get("KIT_CACHE", ROOT / ".kit"))
