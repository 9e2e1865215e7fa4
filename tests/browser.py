"""Headless Chromium for the page tests: skipped where Chromium is not installed, a failure
where ``KIT_REQUIRE_CHROMIUM=1`` (CI) says it must be."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium_path() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("KIT_REQUIRE_CHROMIUM") == "1":
            pytest.fail("KIT_REQUIRE_CHROMIUM=1 but chromium is not on PATH "
                        "(bash tools/install-host.sh installs it)")
        pytest.skip("chromium is not on PATH (bash tools/install-host.sh installs it)")
    return found


def headless(chromium: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(exist_ok=True)
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
               "--no-first-run", f"--user-data-dir={home / 'profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "HOME": str(home)})
