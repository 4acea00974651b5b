"""The rule engine: rules are data (`rules/*.toml`), their conditions a small safe expression
language over a documented fact vocabulary; rules nudge the ranking, adjust settings, and attach
warnings and tips, each with the paper and table it came from."""
