"""oaishim: make any self-hosted LLM server indistinguishable from the official OpenAI API."""

__version__ = "0.1.0"
