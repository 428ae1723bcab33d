"""Running a table's rows: its jobs (:mod:`~.jobs`), one after another in this process
(:mod:`~.reproduce`), or side by side within a deadline through one queue
(:mod:`~.scheduler`) and its executors (:mod:`~.executors`, :mod:`~.interleaved`,
:mod:`~.launchers`); what follows training (:mod:`~.stages`), the result documents
(:mod:`~.documents`), and the plans of a GPU window (:mod:`~.plans`)."""

from .jobs import Job, table_jobs
from .reproduce import reproduce

__all__ = ["Job", "reproduce", "table_jobs"]
