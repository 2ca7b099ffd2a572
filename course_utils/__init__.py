"""course_utils: the helper library of the PPO-RLHF course.

Every formula the lessons teach lives here exactly once; the notebooks import it.
Modules (one concern each):

- ``device``     picking cpu/mps/cuda, dtypes, seeding, threads
- ``hub``        finding a model offline (explicit path, HF cache, the PyPI GGUF wheel)
- ``ppo_math``   masked statistics, KL estimators, shaped rewards, GAE, clipped losses
- ``tasks``      checkable instruction-following tasks, splits, preference pairs
- ``quiz``       quiz cells that answer back
"""

__version__ = "0.1.0"
