"""The ways a table's rows can run, in one vocabulary.

Each :class:`Way` is one way of running rows; its value is the word a result file records
as its ``execution.way`` (or, for :attr:`Way.IN_PROCESS`, the word ``--together`` takes:
its rows record how each of them ran, graphed on streams or eager in turn). The other
words the package uses for the same ways are the members' attributes: the ``--together``
option, the name a concurrency measurement gives it (``tools/concurrency.py``'s
``best_way``) and the name of the planner's model of how rows at once share a GPU.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Way"]


class Way(str, Enum):
    """How rows run (a value equals its word: ``Way.PROCESS == "process"``)."""

    #: the rows in this process, one step of each in turn (``--together in-process``);
    #: each row records one of the next two
    IN_PROCESS = "in-process"
    #: a process of its own per row (``--together processes``)
    PROCESS = "process"
    #: such processes, served by an MPS daemon the caller started (``--together mps``)
    PROCESS_MPS = "process-mps"
    #: in one process with other rows, its steps replayed from CUDA graphs on its own stream
    GRAPHS_ON_STREAMS = "graphs-on-streams"
    #: in one process with other rows, eager steps in turn with theirs
    INTERLEAVED_EAGER = "interleaved-eager"

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def option(self) -> str | None:
        """The ``--together`` word that chooses this way (None: a way a row records, not
        one to choose)."""
        return _OPTIONS.get(self)

    @property
    def measured(self) -> str | None:
        """The name a concurrency measurement gives this way (its report's ``best_way``;
        None: not measured as a way of its own)."""
        return _MEASURED.get(self)

    @property
    def sharing(self) -> str | None:
        """The name of the planner's model of rows sharing a GPU this way (None: none)."""
        return _SHARINGS.get(self)

    @property
    def recorded(self) -> bool:
        """Whether a result file's ``execution.way`` can say this way."""
        return self is not Way.IN_PROCESS

    @classmethod
    def options(cls) -> tuple[str, ...]:
        """The ``--together`` words, in the order the help lists them."""
        return tuple(way.option for way in cls if way.option is not None)

    @classmethod
    def of_option(cls, word: str) -> Way:
        """The way the ``--together`` word ``word`` chooses (KeyError: none)."""
        return {way.option: way for way in cls if way.option is not None}[word]

    @classmethod
    def of_measured(cls, name: str) -> Way | None:
        """The way a concurrency report's ``best_way`` names (None: none)."""
        return {way.measured: way for way in cls if way.measured is not None}.get(name)

    @classmethod
    def records(cls) -> tuple[Way, ...]:
        """The ways a result file's ``execution.way`` can say."""
        return tuple(way for way in cls if way.recorded)


_OPTIONS = {Way.IN_PROCESS: "in-process", Way.PROCESS: "processes", Way.PROCESS_MPS: "mps"}
_MEASURED = {Way.IN_PROCESS: "in-process", Way.PROCESS: "processes",
             Way.PROCESS_MPS: "processes-mps"}
_SHARINGS = {Way.PROCESS: "processes", Way.GRAPHS_ON_STREAMS: "graphs-assumed"}
