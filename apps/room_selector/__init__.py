"""The room-selector world, tasks and agent used by ``apps/train_apo.py``."""
