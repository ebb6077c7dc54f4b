"""Tests of mixle.corpus.format."""
