"""``eopt check``: the paper's five-step workflow (§4.4) on a placed schedule."""
