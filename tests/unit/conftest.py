import pytest


@pytest.fixture(autouse=True)
def no_java(monkeypatch, tmp_path_factory):
    """A unit test may not start Java: PySpark's launcher (and any child it runs) would find none."""
    monkeypatch.setenv("JAVA_HOME", str(tmp_path_factory.getbasetemp() / "no-java-for-unit-tests"))
