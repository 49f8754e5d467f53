import pytest


def pytest_collection_modifyitems(items):
    # Every multi-process test gets a hard limit even without pytest.ini settings.
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(240))
