"""Tests of mixle.provenance (mixle show)."""
