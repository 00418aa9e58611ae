"""Where a window's counters come from: a scrape of each target, or the fleet's Prometheus."""
