"""The step store: output folders and their records, manifests, the done index, caches, gc, verify."""
