"""The job model: the four input forms, their rules, export and text.

The model's names are re-exported here (``from trials.spec import JobSpec``); reading a file is
``trials.spec.load``.
"""

from trials.spec.model import *  # noqa: F403
