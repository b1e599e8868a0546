"""The compile pipeline, one module per stage: ttir → export → to_linalg → lower → codegen → link."""
