"""The error family is rooted at MixleError; corpus errors stay CorpusErrors (issue 28)."""

from __future__ import annotations

import pickle

import pytest

import mixle.errors as errors
from mixle.errors import CheckpointError, CorpusError, MixleError, RevisionMismatchError

_CLASSES = [
    getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)
]


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_is_a_mixle_error(cls: type[Exception]) -> None:
    assert issubclass(cls, MixleError)


@pytest.mark.parametrize("cls", [CheckpointError, RevisionMismatchError])
def test_checkpoint_and_model_errors_are_not_corpus_errors(cls: type[Exception]) -> None:
    assert not issubclass(cls, CorpusError) and issubclass(cls, ValueError)


def test_corpus_errors_keep_their_root_and_redact_urls() -> None:
    corpus_errors = [
        c for c in _CLASSES if c not in (MixleError, CheckpointError, RevisionMismatchError)
    ]
    assert all(issubclass(cls, CorpusError) for cls in corpus_errors)
    error = CheckpointError("s3://key:secret@host/b is corrupt")
    assert "secret" not in str(error) and "secret" not in repr(pickle.loads(pickle.dumps(error)))
