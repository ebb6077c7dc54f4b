"""Tests of mixle.corpus.ingestion."""
