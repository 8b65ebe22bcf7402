from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI runs are derandomized so a red build always reproduces; local runs explore.
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
