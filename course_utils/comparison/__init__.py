"""The comparison harness: TRL's PPOTrainer on our configuration, speed and learning benchmarks."""
