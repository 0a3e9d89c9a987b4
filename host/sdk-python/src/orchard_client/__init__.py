"""A small client for Orchard's training API (rollout groups, the recording proxy) and adapters
that turn group records into slime, verl and SkyRL batches."""

from .adapters import Group, collect_groups, to_skyrl_generator_output, to_slime_samples, to_verl_outputs
from .client import Orchard, OrchardError

__all__ = [
    "Group",
    "Orchard",
    "OrchardError",
    "collect_groups",
    "to_skyrl_generator_output",
    "to_slime_samples",
    "to_verl_outputs",
]
