"""sparkwave runs on a classic and on a Spark Connect session: only `core/spark_features.py` may reach
into what a Connect session lacks (the JVM, the SparkContext, RDDs), and says what Connect does instead."""

from __future__ import annotations

import re
from pathlib import Path

import sparkwave

SRC = Path(sparkwave.__file__).parent
CLASSIC_ONLY = re.compile(r"\._jvm\b|\._jdf\b|\._jsparkSession\b|\._jsc\b|\._sc\b|\.sparkContext\b|\.rdd\b"
                          r"|\bSparkContext\b(?!\")|\bisinstance\([^)]*\bSparkSession\)")


def test_only_spark_features_uses_classic_only_spark_apis():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).as_posix() == "core/spark_features.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if CLASSIC_ONLY.search(code) and '"SparkContext"' not in code:
                found.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not found, "classic-only Spark calls outside core/spark_features.py (a Connect session has none):\n" + \
        "\n".join(found)


def test_a_connect_session_is_told_apart_and_described_without_its_token():
    """A Connect client session (no server needed until its first call; no JVM)."""
    import os

    from pyspark.sql import SparkSession

    from sparkwave.core import spark_features
    from sparkwave.devtools.kafka_broker import free_port

    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    port = free_port()
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}/;token=secret-token").create()
    try:
        assert spark_features.is_session(spark) and spark_features.is_connect(spark)
        assert not isinstance(spark, SparkSession)  # why `is_session` exists
        assert spark_features.describe(spark) == f"Spark Connect at sc://127.0.0.1:{port}"
    finally:
        spark.client.close()
        if before is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
