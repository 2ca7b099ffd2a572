"""Lesson aids: what the notebooks call to show, check and quiz (nothing here trains)."""
