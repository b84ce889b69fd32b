"""``marin.experiment.hf_hub``: the same module as :mod:`marin.experiment.data.hub`, under its old name.

Experiment files import it by this name, and what it defines keeps this name as its identity (in
every existing step hash; workers and pickle find it here), so it stays importable.
"""

import sys

from marin.experiment.data import hub as _moved

sys.modules[__name__] = _moved
