"""Running a table's rows: in this process (:mod:`~.reproduce`), as worker processes
within a deadline (:mod:`~.scheduler`), and the plans of a GPU window (:mod:`~.plans`)."""

from .reproduce import Job, reproduce, table_jobs

__all__ = ["Job", "reproduce", "table_jobs"]
