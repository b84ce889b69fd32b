"""Generating with a trained model: ``generations(...)`` steps (completions as a cached, content-hashed
dataset), ``judged_pairs(...)`` (their preference pairs by a judge function) and the model loader they and ``marin serve`` share."""

from marin.experiment.generation.judged import JudgedPairs, judged_pairs
from marin.experiment.generation.model import GenerationModel, ModelNotFound, load_generation_model
from marin.experiment.generation.steps import Generations, GenerationsConfig, generations, generations_step

__all__ = ["GenerationModel", "Generations", "GenerationsConfig", "JudgedPairs", "ModelNotFound", "generations",
           "generations_step", "judged_pairs", "load_generation_model"]
