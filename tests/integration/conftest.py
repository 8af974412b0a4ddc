"""Shared fixtures for the integration tests: the real `vibevoice` binary and the test data."""
import os
import pathlib

import pytest


def pytest_addoption(parser):
    parser.addoption("--vibevoice", action="store", default=None, help="path of the vibevoice binary")


@pytest.fixture(scope="session")
def vibevoice(request):
    path = request.config.getoption("--vibevoice") or os.environ.get("VIBEVOICE_BIN")
    if not path:
        pytest.fail("pass --vibevoice PATH (ctest does)")
    return pathlib.Path(path)


@pytest.fixture(scope="session")
def data_dir():
    root = os.environ.get("VV_TEST_DATA_DIR") or str(pathlib.Path(__file__).resolve().parents[1] / "data")
    return pathlib.Path(root)


@pytest.fixture(scope="session")
def golden_dir(data_dir):
    return pathlib.Path(os.environ.get("VV_GOLDEN_DIR") or data_dir / "golden")
