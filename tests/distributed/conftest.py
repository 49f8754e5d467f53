import pytest


def pytest_collection_modifyitems(config, items):
    # test_pytorch_suite.py: only the selected tests of PyTorch's suite class.
    keep, drop = [], []
    for item in items:
        module = getattr(item, "module", None)
        selected = getattr(module, "PYTORCH_SUITE_SELECTED", None)
        in_suite = selected is not None and getattr(item, "cls", None) is not None
        (drop if in_suite and item.name not in selected else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # Every multi-process test gets a hard limit even without pytest.ini settings.
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(240))
