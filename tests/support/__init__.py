"""What the tests share: real servers (a collector, PostgreSQL, Prometheus, `/metrics` servers,
a TCP proxy), payloads as engines print them, the AISBench stand-in, waits that adapt to load."""
