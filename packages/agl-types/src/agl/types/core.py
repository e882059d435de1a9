"""Compatibility path: the core data model, now defined by concept in :mod:`agl.types.statuses`,
:mod:`agl.types.rollouts`, :mod:`agl.types.workers`, :mod:`agl.types.triplets` and :mod:`agl.types.datasets`.

``from agl.types.core import Rollout`` keeps working; new code imports from :mod:`agl.types` itself.
"""

from . import datasets, rollouts, statuses, triplets, workers
from .datasets import *  # noqa: F403
from .rollouts import *  # noqa: F403
from .statuses import *  # noqa: F403
from .triplets import *  # noqa: F403
from .workers import *  # noqa: F403

# Each concept module's own list, so this path offers exactly what they define.
__all__: list[str] = []
__all__ += statuses.__all__
__all__ += rollouts.__all__
__all__ += workers.__all__
__all__ += triplets.__all__
__all__ += datasets.__all__
