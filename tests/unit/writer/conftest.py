import pytest

from rocketbox.writer import append


@pytest.fixture(autouse=True, params=["vector", "few"])
def put_path(request, monkeypatch):
    """Every writer test runs twice: passes appended by the vector path, then by _put_few."""
    monkeypatch.setattr(append, "FEW_REQUESTS", 0 if request.param == "vector" else 10**6)
    return request.param
