"""Models given to students (trusted code: the grader also runs them to compute references)."""
