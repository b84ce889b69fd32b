"""Generating with a trained model: ``generations(...)`` steps (completions as a cached, content-hashed
dataset) and the model loader they and ``marin serve`` share."""

from marin.experiment.generation.model import GenerationModel, ModelNotFound, load_generation_model
from marin.experiment.generation.steps import Generations, GenerationsConfig, generations, generations_step

__all__ = ["GenerationModel", "Generations", "GenerationsConfig", "ModelNotFound", "generations",
           "generations_step", "load_generation_model"]
