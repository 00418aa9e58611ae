"""A client that streams completions and keeps what it saw: one chunk per speculative step."""

import json
import time

from tests.support import clients


def streamed_steps(base_url: str, requests: int, pause_s: float = 0.0) -> list[int]:
    """Stream `requests` completions one after another (`pause_s` between them); the tokens of
    every chunk seen, which are one speculative step's accepted tokens + 1."""
    return [step for request in streamed_requests(base_url, requests, pause_s) for step in request]


def streamed_requests(base_url: str, requests: int, pause_s: float = 0.0) -> list[list[int]]:
    """As `streamed_steps`, the steps of each request apart."""
    seen: list[list[int]] = []
    with clients.client(base_url=base_url, timeout=60) as http:
        for index in range(requests):
            if index and pause_s:
                time.sleep(pause_s)
            body = {"prompt": f"q{index}", "max_tokens": 24, "stream": True}
            steps: list[int] = []
            with http.stream("POST", "/v1/completions", json=body) as answer:
                for line in answer.iter_lines():
                    if line.startswith("data: {"):
                        steps.append(json.loads(line[6:])["choices"][0]["text"].count("tok "))
            seen.append(steps)
    return seen
