"""The engine's core: steps, placeholders, the config walker, hashing, lazy handles, step traits.

Pure data: nothing here reads or writes a store or runs a step.
"""
