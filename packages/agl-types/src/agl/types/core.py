"""Compatibility path: the core data model, now defined by concept in :mod:`agl.types.statuses`,
:mod:`agl.types.rollouts`, :mod:`agl.types.workers`, :mod:`agl.types.triplets` and :mod:`agl.types.datasets`.

``from agl.types.core import Rollout`` keeps working; new code imports from :mod:`agl.types` itself.
"""

from .datasets import Dataset
from .rollouts import (
    Attempt,
    AttemptedRollout,
    AttemptUpdate,
    EnqueueRolloutRequest,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutUpdate,
    TaskInput,
)
from .statuses import (
    ATTEMPT_STATUSES,
    FINISHED_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    QUEUED_STATUSES,
    ROLLOUT_STATUSES,
    RUNNING_STATUSES,
    AttemptStatus,
    RolloutStatus,
    StatusCounts,
    WorkerStatus,
    is_finished,
    is_queued,
    is_running,
)
from .triplets import Triplet
from .workers import Worker

__all__ = [
    "ATTEMPT_STATUSES",
    "FINISHED_STATUSES",
    "LIVE_ATTEMPT_STATUSES",
    "QUEUED_STATUSES",
    "ROLLOUT_STATUSES",
    "RUNNING_STATUSES",
    "Attempt",
    "AttemptStatus",
    "AttemptUpdate",
    "AttemptedRollout",
    "Dataset",
    "EnqueueRolloutRequest",
    "Rollout",
    "RolloutConfig",
    "RolloutMode",
    "RolloutStatus",
    "RolloutUpdate",
    "StatusCounts",
    "TaskInput",
    "Triplet",
    "Worker",
    "WorkerStatus",
    "is_finished",
    "is_queued",
    "is_running",
]
