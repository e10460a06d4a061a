"""The real OS calls behind each platform's implementation, run on that OS's CI runner and
skipped elsewhere saying which OS they need; their logic is unit-tested everywhere against fakes
(``tests/unit``)."""
