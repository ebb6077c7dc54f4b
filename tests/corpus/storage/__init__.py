"""Tests of mixle.corpus.storage."""
