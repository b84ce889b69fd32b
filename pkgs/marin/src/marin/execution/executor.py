"""``marin.execution.executor``: Marin's executor API, as Marin's experiment files import it
(defined in :mod:`marin.execution.compat.executor`, whose step function and config classes keep
this module as their identity)."""

from marin.execution.compat.executor import (
    THIS_OUTPUT_PATH,
    ExecutorCall,
    ExecutorMainConfig,
    ExecutorStep,
    ExecutorStepFailed,
    InputName,
    OutputName,
    VersionedValue,
    _PrefixPath,
    check_module_level,
    ensure_versioned,
    executor_main,
    output_path_of,
    parse_executor_args,
    run_executor_step,
    this_output_path,
    unwrap_versioned_value,
    versioned,
)

__all__ = ["THIS_OUTPUT_PATH", "ExecutorCall", "ExecutorMainConfig", "ExecutorStep", "ExecutorStepFailed",
           "InputName", "OutputName", "VersionedValue", "_PrefixPath", "check_module_level", "ensure_versioned",
           "executor_main", "output_path_of", "parse_executor_args", "run_executor_step", "this_output_path",
           "unwrap_versioned_value", "versioned"]
