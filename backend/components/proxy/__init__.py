"""The front door (data plane): routing, retries and job reporting. Policies are pure functions."""
