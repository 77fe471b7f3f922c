"""tq's shared test plugin: fixtures ``seed`` / ``gen`` (a fresh seed per test, printed;
``TQ_TEST_SEED=<seed>`` replays one) and the hypothesis profiles."""

pytest_plugins = ["tq_core.testing.plugin"]
