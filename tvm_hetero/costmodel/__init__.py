"""Cost models fitted to profile records: no IR rewriting, no measurement."""
