"""``text``: UTF-8 text files, tokenized (by UTF-8 bytes unless ``--tokenizer`` says).

A whole file is a document, or each blank-line-separated paragraph with
``split="paragraphs"``. Consecutive files share units. A location is
``(file in the unit, line)``.
"""

from __future__ import annotations

from collections.abc import Iterator

from mixle.corpus.ingestion.formats.base import FormatDoc, InputFormat
from mixle.corpus.ingestion.formats.reading import (
    Collector,
    InputBatch,
    ReadOptions,
    RecordOrigins,
    iter_lines,
    make_tokenizer,
)
from mixle.corpus.ingestion.input_guard import ReadCursor, guard
from mixle.corpus.ingestion.work import WorkUnit, open_binary
from mixle.errors import IngestError

__all__ = ["TextFormat"]


def _read_whole(path: str) -> bytes:
    """The bytes of the file ``path``.

    Raises
    ------
    IngestError
        It cannot be read (names it).
    """
    try:
        with open_binary(path) as handle:
            return bytes(handle.read())
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({exc}).") from exc


class TextFormat(InputFormat):
    """Plain text: a file or a paragraph per document."""

    name = "text"
    extensions = (".txt", ".text", ".md")
    groups_files = True
    record_kind = "line"
    doc = FormatDoc(
        files="`.txt`, `.text`, `.md`",
        document="a whole file, or each blank-line-separated paragraph with `--split paragraphs`",
        units="consecutive files up to `--unit-size`",
    )

    def read(self, unit: WorkUnit, options: ReadOptions) -> Iterator[InputBatch]:
        """The documents of the unit's files, in order (a paragraph's location is its
        first line)."""
        collector = Collector(make_tokenizer(options.tokenizer or "bytes"))

        def emit(lines: list[bytes], file_index: int, first_line: int) -> None:
            data = b"".join(lines)
            if options.split == "paragraphs":
                data = data.rstrip(b"\r\n")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                prefix = data[: exc.start]
                line = first_line + prefix.count(b"\n")
                column = exc.start - (prefix.rfind(b"\n") + 1) + 1
                reason = f"invalid UTF-8 at column {column} ({exc.reason})"
                collector.rejects.append(((file_index, line), reason))
                return
            collector.add_text(text, (file_index, first_line), len(data))

        cursor = ReadCursor()
        for file_index, path in enumerate(unit.paths):
            cursor.location, cursor.offset = (file_index, 0), -1
            if options.split != "paragraphs":  # the whole file: one read, no line loop
                with guard(cursor, collector.reject):
                    data = _read_whole(path)
                    collector.input_bytes += len(data)
                    collector.lines += data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
                    emit([data], file_index, 0)
                if collector.full():
                    yield collector.take()
                continue
            with guard(cursor, collector.reject):
                block: list[bytes] = []
                block_line = 0
                for line_number, (_, line) in enumerate(iter_lines(path, cursor)):
                    cursor.location = (file_index, line_number)
                    collector.input_bytes += len(line)
                    collector.lines += 1
                    if not line.strip():
                        if block:
                            emit(block, file_index, block_line)
                            block = []
                            if collector.full():
                                yield collector.take()
                        continue
                    if not block:
                        block_line = line_number
                    block.append(line)
                if block:
                    emit(block, file_index, block_line)
            if collector.full():
                yield collector.take()
        yield collector.take()

    def describe(self, unit: WorkUnit, location: tuple[int, int], line_base: int) -> str:
        """``FILE line L``, ``L`` counted from 1."""
        file_index, line = location
        return f"{unit.paths[file_index]} line {line + 1}"

    def origins(self, unit: WorkUnit, batch: InputBatch) -> RecordOrigins:
        """The file and the document's first line in it."""
        return RecordOrigins.from_locations(self.record_kind, batch.locations, 0, 1)
