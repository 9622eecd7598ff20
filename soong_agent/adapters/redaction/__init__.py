"""Secret redaction (CFG-6): key values and high-confidence secret patterns out of what is kept."""

from soong_agent.adapters.redaction.scrubber import SecretScrubber

__all__ = ["SecretScrubber"]
