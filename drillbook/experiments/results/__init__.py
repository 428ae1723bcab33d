"""Result files: one schema for every trained row (:mod:`~.schema`, written and read by
:mod:`~.files`), what the chapters and the report read from them, and how they are
shown."""

from .files import (
    DYNAMIC_METRICS,
    DYNAMIC_REQUIRED,
    FINAL_STATUSES,
    FINETUNED_REQUIRED,
    OPTIONAL,
    PACK_LIMIT_BYTES,
    READABLE_FORMATS,
    REQUIRED,
    RESULT_FORMAT,
    book_results,
    gpu_results,
    gpu_union,
    gpu_windows,
    is_final,
    load_results,
    pack_results,
    read_result,
    result_precision,
    result_task,
    unpack_results,
    validate_result,
    write_result,
)

__all__ = ["DYNAMIC_METRICS", "DYNAMIC_REQUIRED", "FINAL_STATUSES",
           "FINETUNED_REQUIRED", "OPTIONAL", "PACK_LIMIT_BYTES", "READABLE_FORMATS", "REQUIRED",
           "RESULT_FORMAT", "book_results", "gpu_results", "gpu_union", "gpu_windows",
           "is_final", "load_results", "pack_results", "read_result", "result_precision",
           "result_task", "unpack_results", "validate_result", "write_result"]
