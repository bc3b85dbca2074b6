"""Tests that need no Spark and no Java: seconds, to run after every edit (`make unit`)."""
