"""Experiment files name models, optimizers and datasets; planning them must not pay for JAX."""

from __future__ import annotations

import subprocess
import sys


def _fresh(code: str, *args: str) -> str:
    """What ``code`` prints in a fresh interpreter (nothing imported before it), given ``args`` (sys.argv[1:])."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout


def test_naming_configs_does_not_import_jax() -> None:
    # Experiment files name models and optimizers; planning them must not pay for JAX.
    code = ("import sys, levanter, levanter.data, marin.report; "
            "levanter.AdamConfig; levanter.LlamaConfig; levanter.data.DatasetSpec; "
            "print(sorted(m for m in ('jax', 'optax', 'grain', 'orbax', 'haiku') if m in sys.modules))")
    assert _fresh(code).strip() == "[]"


def test_the_flat_experiment_surface_loads_each_name_from_its_module_on_use() -> None:
    code = ("import sys, marin.experiment as m; "
            "print(sorted(k for k in sys.modules if k.startswith('marin.experiment.'))); "
            "from marin.experiment import Step, output_path_of; "
            "print([k for k in ('jax', 'marin.experiment.training.train') if k in sys.modules]); "
            "import marin.experiment.training.train as train, marin.experiment.data as data; "
            "print(m.train_lm is train.train_lm and m.tokenized is data.tokenized, "
            "all(getattr(m, n) is not None for n in m.__all__))")
    assert _fresh(code).splitlines() == ["[]", "[]", "True True"]


def test_naming_harness_settings_and_story_tasks_does_not_import_jax_or_the_harness() -> None:
    # Eval steps name their harness settings in configs; planning them must not pay for JAX or lm_eval.
    code = ("import sys, levanter.eval_harness as h, marin.experiment.tasks.story; h.HarnessConfig; h.TaskRunConfig; "
            "print(sorted(m for m in ('jax', 'lm_eval', 'datasets', 'tokenizers') if m in sys.modules))")
    assert _fresh(code).strip() == "[]"


def test_planning_a_graph_that_reads_no_source_loads_neither_fingerprinting_nor_code_digests(tmp_path) -> None:
    # The no-op path of `marin run`: steps made from handles, hashed and planned against a store.
    code = ("import sys, marin.experiment.data, marin.experiment.datakit, marin.cli.display; "
            "from marin.execution.run.runner import StepRunner; from marin.execution.core.step import Step; "
            "import benchmarks.chain_steps as c; "
            "StepRunner(prefix=sys.argv[1], config=None).plan(c.chain(3)); "
            "print(sorted(m for m in ('marin.execution.store.sources', 'marin.execution.store.code_digest', "
            "'sqlite3') if m in sys.modules))")
    assert _fresh(code, str(tmp_path / "store")).strip() == "[]"


def test_configured_cache_keys_load_no_cryptography_until_an_entry_is_signed_or_checked(tmp_path) -> None:
    # Trusted keys are parsed when the settings are made, on every command; ed25519 waits for a fetch.
    code = ("import sys; from marin.execution.run.runner import StepRunner; "
            "import benchmarks.chain_steps as c; "
            "r = StepRunner(prefix=sys.argv[1], config=None, caches=[sys.argv[2]], "
            "cache_trusted_keys=['ci-1:' + 'A' * 43 + '=']); r.plan(c.chain(3)); "
            "print([k.name for k in r.settings.cache_trusted_keys], 'cryptography' in sys.modules)")
    assert _fresh(code, str(tmp_path / "store"), str(tmp_path / "cache")).strip() == "['ci-1'] False"


def test_the_console_script_answers_a_noop_run_before_importing_click_or_the_engine() -> None:
    # `marin run` asks its no-op record (marin.cli.noop) before anything else: the answer must cost
    # a few milliseconds over the interpreter's start, so the entry point and the record's reader
    # and recorder load the standard library's cheapest modules only.
    code = ("import sys, marin.cli.main, marin.cli.noop, marin.cli.noop_recording; "
            "print(sorted(m for m in ('click', 'json', 're', 'typing', 'collections', 'rigging', 'marin.execution', "
            "'marin.cli.group') if m in sys.modules))")
    assert _fresh(code).strip() == "[]"


def test_a_run_with_nothing_to_build_hides_the_accelerator_without_loading_clients_or_admission(tmp_path) -> None:
    # Every run finds the host's accelerator (to hide it from itself); one that builds nothing must
    # still pay for neither fray's clients, nor its request types, nor iris's admission.
    code = ("import sys; from marin.execution.run.runner import StepRunner; import benchmarks.chain_steps as c; "
            "r = StepRunner(prefix=sys.argv[1], config=None, max_parallel=1); ok = r.run(c.chain(3)).ok; r.close(); "
            "print(ok, sorted(m for m in ('fray.local', 'fray.resources', 'iris.admission') if m in sys.modules))")
    prefix = str(tmp_path / "store")
    first, again = _fresh(code, prefix), _fresh(code, prefix)
    assert first.split()[0] == "True" and "iris.admission" in first  # it built: admission was asked
    assert again.strip() == "True []"
