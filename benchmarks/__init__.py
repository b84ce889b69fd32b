"""Side-by-side performance reports (``make bench``); never timed assertions."""
