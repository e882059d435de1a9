"""APO: automatic prompt optimisation by textual gradients and beam search (extra ``apo``: poml, openai).

Importing this package is light: ``poml`` and ``openai`` are imported when APO first needs them.
"""

from ._beam import PromptCandidate
from ._llm import AllRolloutsFailed, LLMCallFailed, RetryPolicy
from ._prompts import EDIT_VARIANTS, GRADIENT_VARIANTS, PROMPTS_DIR, RolloutResultForAPO, render_poml
from .apo import APO, APORoundSummary

__all__ = [
    "APO",
    "EDIT_VARIANTS",
    "GRADIENT_VARIANTS",
    "PROMPTS_DIR",
    "APORoundSummary",
    "AllRolloutsFailed",
    "LLMCallFailed",
    "PromptCandidate",
    "RetryPolicy",
    "RolloutResultForAPO",
    "render_poml",
]
