"""A client that streams completions and keeps what it saw: one chunk per speculative step."""

import json
import time

import httpx


def streamed_steps(base_url: str, requests: int, pause_s: float = 0.0) -> list[int]:
    """Stream `requests` completions one after another (`pause_s` between them); the tokens of
    every chunk seen, which are one speculative step's accepted tokens + 1."""
    steps: list[int] = []
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for index in range(requests):
            if index and pause_s:
                time.sleep(pause_s)
            body = {"prompt": f"q{index}", "max_tokens": 24, "stream": True}
            with http.stream("POST", "/v1/completions", json=body) as answer:
                for line in answer.iter_lines():
                    if line.startswith("data: {"):
                        steps.append(json.loads(line[6:])["choices"][0]["text"].count("tok "))
    return steps
