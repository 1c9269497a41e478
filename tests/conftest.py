"""Shared test set-up: tests marked `gpu` skip, with the reason, where CUDA is unusable."""

import pytest

from a800lab.core.backends import HAS_CUDA, why_unavailable


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why_unavailable('cuda')}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
