"""Suite-wide test settings: hypothesis profiles.

`prism` (the default here): 300 examples a property, no deadline (2 shared cores). Under CI
(the `CI` environment variable) the same, derandomized, so a submission's run explores the same
examples every time and cannot fail on a fresh random draw. `HYPOTHESIS_PROFILE=deep` draws
4,000 examples a property, for hunting.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_base = {"max_examples": 300, "deadline": None,
         "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("prism", **_base)
settings.register_profile("ci", derandomize=True, database=None, **_base)
settings.register_profile("deep", **{**_base, "max_examples": 4000})
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "prism")
)


def pytest_collection_modifyitems(config, items):
    """Run the tests that need a QApplication last, in their collected order.

    Once a QApplication exists, pytest-qt processes Qt events after every test. A Qt test that
    ran a qasync loop with a live server (tests/app/test_gui.py) could leave native objects that
    a later test's event processing touched while other servers and engine threads churned: one
    full run in about ten segfaulted there. With the Qt tests last, no server test runs with a
    QApplication alive.
    """
    qt = [it for it in items if {"qapp", "qtbot"} & set(getattr(it, "fixturenames", ()))]
    if qt:
        ids = {id(it) for it in qt}
        items[:] = [it for it in items if id(it) not in ids] + qt
