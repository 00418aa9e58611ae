"""A simulated serving engine for demos and tests: OpenAI endpoints and engine-shaped `/metrics`."""
