"""The audit: the recorder's MCAP bag, brace-audit's report and replay, the paper's tables from the bags alone."""
