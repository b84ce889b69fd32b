"""``marin.experiment.sweep_space``: the same module as :mod:`marin.experiment.sweeps.space`, under its old name.

Experiment files import it by this name, and what it defines keeps this name as its identity (in
every existing step hash; workers and pickle find it here), so it stays importable.
"""

import sys

from marin.experiment.sweeps import space as _moved

sys.modules[__name__] = _moved
