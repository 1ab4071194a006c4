import pytest

from tests.integration.harness import Appliance

LOG_TAIL = 6000        # characters of each appliance's log attached to a failed test's report
APPLIANCES = pytest.StashKey[list]()     # the appliances a test made, for its report


@pytest.fixture
def appliance_factory(tmp_path, request):
    made = request.node.stash.setdefault(APPLIANCES, [])

    def make(**overrides):
        app = Appliance(_dir(tmp_path, len(made)), **overrides)
        made.append(app)
        return app

    yield make
    for app in made:
        app.cleanup()


# modules left out of the fast lane (``pytest -m "not slow"``): real clients of other languages,
# kills and damage, benchmarks, the long consumer-group scenarios; each runs in the whole suite
SLOW = {"test_bench", "test_bench_features", "test_bench_ha", "test_query", "test_sql92", "test_reply", "test_replication",
        "test_slave", "test_failover", "test_ha_faults", "test_cluster",
        "test_client_install", "test_client_resilience", "test_examples", "test_gaps", "test_cppclient",
        "test_nodeclient", "test_transactions", "test_crash", "test_damage", "test_disk",
        "test_retention", "test_orderly", "test_reset_offset", "test_admin", "test_clients", "test_readers",
        "test_nameserver", "test_spark", "test_systemd", "test_metrics", "test_bench_inprocess", "test_grpc_consumers"}


# the modules that take longest, longest first: handed to the workers before the rest (--dist
# loadfile gives out modules in collection order), so no worker starts one of them at the end
LONGEST = ["test_spark", "test_bench", "test_bench_features", "test_bench_inprocess", "test_bench_ha", "test_cluster",
           "test_failover", "test_systemd", "test_cppclient", "test_examples", "test_grpc_consumers", "test_grpc",
           "test_metrics", "test_appliance",
           "test_crash", "test_transactions", "test_damage", "test_delay", "test_timer", "test_gaps", "test_readers", "test_client_install"]


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(LONGEST)))


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory):
    """The programs of ``tests/integration/java/``, compiled against the real 4.9.8 client."""
    from tests.integration import javaclient
    why = javaclient.missing()
    if why:
        pytest.skip(why)
    return javaclient.compile_all(str(tmp_path_factory.mktemp("java-classes")))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the tail of each of its appliances' logs: on a CI machine that
    is the only view of what the roles did."""
    rep = yield
    if rep.failed:
        for i, app in enumerate(item.stash.get(APPLIANCES, [])):
            rep.sections.append((f"appliance {i} log (tail)", app.log_text()[-LOG_TAIL:]))
    return rep


def _dir(tmp_path, i):
    d = tmp_path / f"appliance{i}"
    d.mkdir()
    return d
