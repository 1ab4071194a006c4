import pytest

from tests.integration.harness import Appliance


@pytest.fixture
def appliance_factory(tmp_path):
    made = []

    def make(**overrides):
        app = Appliance(_dir(tmp_path, len(made)), **overrides)
        made.append(app)
        return app

    yield make
    for app in made:
        app.cleanup()


def _dir(tmp_path, i):
    d = tmp_path / f"appliance{i}"
    d.mkdir()
    return d
