"""Running a plan: the runner's API, the scheduler, the run's state, attempts, publishing, workers."""
